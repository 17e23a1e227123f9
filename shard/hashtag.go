package shard

import (
	"bytes"
	"errors"
)

// ErrHashTag: a hash tag must be exactly two bytes, e.g. "{}".
var ErrHashTag = errors.New("shard: hash tag must be two characters")

// HashTag is Twemproxy's hash_tag: when a key holds the opening character
// and, after it, the closing one, only the non-empty text between them is
// hashed; otherwise the whole key is. The zero HashTag hashes whole keys.
type HashTag struct {
	open, close byte
	set         bool
}

// DefaultHashTag returns the tag "{}", the one Twemproxy configs usually
// name. It is a function so the value cannot be changed by other packages.
func DefaultHashTag() HashTag { return HashTag{'{', '}', true} }

// ParseHashTag parses a two-character tag such as "{}"; "" is no tag.
func ParseHashTag(s string) (HashTag, error) {
	switch len(s) {
	case 0:
		return HashTag{}, nil
	case 2:
		return HashTag{s[0], s[1], true}, nil
	}
	return HashTag{}, ErrHashTag
}

// String returns the tag as written in a config ("" for none).
func (t HashTag) String() string {
	if !t.set {
		return ""
	}
	return string([]byte{t.open, t.close})
}

// Extract returns the part of key to hash, a sub-slice of key (no
// allocation). "user:{42}:rl" → "42"; a key without a complete tag, or with
// an empty one ("{}"), is returned whole.
func (t HashTag) Extract(key []byte) []byte {
	if !t.set {
		return key
	}
	i := bytes.IndexByte(key, t.open)
	if i < 0 {
		return key
	}
	j := bytes.IndexByte(key[i+1:], t.close)
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}
