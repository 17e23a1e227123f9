package protocol

// This file is the meta protocol's parsing layer: mg, ms, md, ma, mn and me
// as memcached 1.6.18 parses them (proto_text.c), as pure functions over the
// buffer, plus their wire form towards a shard and the reading of their
// replies. How the proxy answers them is in meta_server.go; how the
// in-process backend executes them is in memory_meta.go.
//
// The proxy validates every meta request the way memcached does and answers
// a bad one itself, with memcached's error line; a valid one is forwarded
// verbatim (its line as received, then its data block for ms), so that every
// flag memcached knows reaches the shard and its reply comes back byte for
// byte. An opaque longer than 32 bytes is the exception: memcached checks it
// only while it writes the reply of mg and ma, after their N, T or
// arithmetic have taken effect, so such an mg or ma is forwarded and the
// shard answers the error (md and ms are refused by the proxy, as nothing
// happens on the shard for them either).

import (
	"bytes"
)

// The meta protocol's error replies (memcached 1.6.18's wording).
var (
	ErrMetaDuplicateFlag  = &ReplyError{"CLIENT_ERROR duplicate flag"}
	ErrMetaInvalidFlag    = &ReplyError{"CLIENT_ERROR invalid flag"}
	ErrMetaFlagMd         = &ReplyError{"CLIENT_ERROR invalid or duplicate flag"} // md and ma: any flag error
	ErrMetaDecodingKey    = &ReplyError{"CLIENT_ERROR error decoding key"}
	ErrMetaBadToken       = &ReplyError{"CLIENT_ERROR bad token in command line format"}
	ErrMetaModeLength     = &ReplyError{"CLIENT_ERROR incorrect length for M token"}
	ErrMetaBadInitial     = &ReplyError{"CLIENT_ERROR invalid numeric initial value"}
	ErrMetaBadDelta       = &ReplyError{"CLIENT_ERROR invalid numeric delta value"}
	ErrMetaTooManyFlagsMg = &ReplyError{"CLIENT_ERROR options flags are too long"} // mg
	ErrMetaTooManyFlags   = &ReplyError{"CLIENT_ERROR options flags too long"}     // ms md ma
	ErrMetaOpaqueTooLong  = &ReplyError{"CLIENT_ERROR opaque token too long"}
	ErrMetaMsMode         = &ReplyError{"CLIENT_ERROR invalid mode for ms M token"}
	ErrMetaMaMode         = &ReplyError{"CLIENT_ERROR invalid mode for ma M token"}
)

// memcached's limits on meta requests.
const (
	metaMaxTokens    = 20 // MFLAG_MAX_OPT_LENGTH: tokens (+1 for the end) allowed
	MetaMaxOpaque    = 32 // MFLAG_MAX_OPAQUE_LENGTH
	memcachedTokens  = 24 // MAX_TOKENS of the tokenizer
	maxDecodedKeyLen = MaxKeyLen / 4 * 3
)

// MetaArgs is what memcached's _meta_flag_preparse learns from the flag
// tokens. Token order matters for the reply, so executors walk the tokens
// again (NextMetaFlag); this holds the values.
type MetaArgs struct {
	Quiet, Base64, Value, Vivify, HasCAS, HasTTL bool
	Mode                                         byte // M token's mode, 0 when absent
	TTL, VivifyTTL                               int32
	ClientFlags                                  uint32
	CAS, Delta, Initial                          uint64
	OpaqueTooLong                                bool
	seen                                         [2]uint64 // bit per flag byte < 128
}

// has reports whether flag o was given.
func (mf *MetaArgs) Has(o byte) bool { return o < 128 && mf.seen[o>>6]&(1<<(o&63)) != 0 }

// NextMetaFlag returns the next flag token of flags and the rest.
func NextMetaFlag(flags []byte) (tok, rest []byte) {
	flags = skipSpaces(flags)
	if len(flags) == 0 {
		return nil, nil
	}
	return nextToken(flags)
}

// PreparseMeta is memcached's _meta_flag_preparse over the flag tokens, for
// a request whose key is key (not decoded). Like memcached it stops at the
// first duplicate or unknown flag, and otherwise goes on after an error,
// the last error's message winning; def is the message of an error that
// sets none (a bad F token).
func PreparseMeta(key, flags []byte, def *ReplyError) (mf MetaArgs, err *ReplyError) {
	var fail *ReplyError
	for {
		var t []byte
		t, flags = NextMetaFlag(flags)
		if t == nil {
			break
		}
		o := t[0]
		if o >= 127 || mf.Has(o) {
			return mf, ErrMetaDuplicateFlag
		}
		mf.seen[o>>6] |= 1 << (o & 63)
		arg := t[1:]
		switch o {
		case 'b':
			mf.Base64 = true
			var buf [MaxKeyLen]byte
			if n := DecodeMetaKey(buf[:], key); n == 0 {
				fail = ErrMetaDecodingKey
			}
		case 'N':
			mf.Vivify = true
			v, ok := ParseInt32(arg)
			if !ok {
				fail = ErrMetaBadToken
			}
			mf.VivifyTTL = v
		case 'T':
			v, ok := ParseInt32(arg)
			if !ok {
				fail = ErrMetaBadToken
			}
			mf.TTL, mf.HasTTL = v, ok
		case 'R':
			if _, ok := ParseInt32(arg); !ok {
				fail = ErrMetaBadToken
			}
		case 'l', 'P', 'L', 'k', 's', 't', 'c', 'f', 'h', 'u', 'I':
		case 'O':
			if len(t) > MetaMaxOpaque {
				mf.OpaqueTooLong = true
			}
		case 'v':
			mf.Value = true
		case 'q':
			mf.Quiet = true
		case 'F':
			v, ok := ParseUint(arg)
			if !ok {
				if fail == nil {
					fail = def
				}
			}
			mf.ClientFlags = uint32(v)
		case 'C':
			v, ok := ParseUint(arg)
			if !ok {
				fail = ErrMetaBadToken
			}
			mf.CAS, mf.HasCAS = v, ok
		case 'M':
			if len(t) != 2 {
				fail = ErrMetaModeLength
			} else {
				mf.Mode = t[1]
			}
		case 'J':
			v, ok := ParseUint(arg)
			if !ok {
				fail = ErrMetaBadInitial
			}
			mf.Initial = v
		case 'D':
			v, ok := ParseUint(arg)
			if !ok {
				fail = ErrMetaBadDelta
			}
			mf.Delta = v
		default:
			return mf, ErrMetaInvalidFlag
		}
	}
	return mf, fail
}

// countTokens counts the space-separated tokens of b the way memcached's
// tokenizer does (it stops at memcachedTokens-1).
func countTokens(b []byte) int {
	n := 0
	for {
		b = skipSpaces(b)
		if len(b) == 0 || n == memcachedTokens-1 {
			return n
		}
		_, b = nextToken(b)
		n++
	}
}

// parseMeta parses a meta command's line (Parse has set req.Cmd); n is the
// length of the line with its end. See Parse for the results.
func parseMeta(buf, line []byte, lim Limits, req *Request, n int) (int, error) {
	// memcached's tokenizer works on a C string: a NUL ends the line.
	if i := bytes.IndexByte(line, 0); i >= 0 {
		line = line[:i]
	}
	req.Line = line
	_, rest := nextToken(skipSpaces(line)) // the command
	ntok := 1 + countTokens(rest)
	if req.Cmd == CmdMn {
		return n, nil
	}
	rest = skipSpaces(rest)
	key, rest := nextToken(rest)
	if len(key) == 0 {
		if req.Cmd == CmdMe {
			return n, ErrBadFormat
		}
		return n, ErrUnknownCommand
	}
	if !ValidKey(key) {
		// Too long, or a control byte: memcached 1.6 takes control bytes
		// in meta keys, the proxy refuses them as it does in text
		// commands (keys stay legal everywhere behind it).
		return n, ErrBadFormat
	}
	req.Keys = append(req.Keys, key)
	if req.Cmd == CmdMe {
		// me only knows "b" as its first flag, and ignores the rest.
		req.MetaFlags = rest
		if t, _ := NextMetaFlag(rest); string(t) == "b" {
			var dec [MaxKeyLen]byte
			if DecodeMetaKey(dec[:], key) == 0 {
				req.Keys = req.Keys[:0]
				return n, ErrBadFormat
			}
			req.Base64 = true
		}
		return n, nil
	}
	if req.Cmd == CmdMs {
		return parseMetaSet(buf, key, rest, ntok, lim, req, n)
	}
	if ntok+1 > metaMaxTokens {
		req.Keys = req.Keys[:0]
		if req.Cmd == CmdMg {
			return n, ErrMetaTooManyFlagsMg
		}
		return n, ErrMetaTooManyFlags
	}
	req.MetaFlags = rest
	mf, err := PreparseMeta(key, rest, ErrBadFormat)
	if err == nil && mf.OpaqueTooLong && req.Cmd == CmdMd {
		err = ErrMetaOpaqueTooLong
	}
	if err == nil && req.Cmd == CmdMa {
		switch mf.Mode {
		case 0, 'I', '+', 'D', '-':
		default:
			err = ErrMetaMaMode
		}
	}
	if err != nil {
		req.Keys = req.Keys[:0]
		if req.Cmd != CmdMg && err != ErrMetaOpaqueTooLong && err != ErrMetaMaMode {
			err = ErrMetaFlagMd
		}
		return n, err
	}
	req.Quiet, req.Base64 = mf.Quiet, mf.Base64
	return n, nil
}

// parseMetaSet parses the rest of "ms <key> <datalen> <flags>*" and finds
// its data block. Errors found before the data length is known leave the
// data to be read as commands, as memcached does; later ones swallow it.
func parseMetaSet(buf, key, rest []byte, ntok int, lim Limits, req *Request, n int) (int, error) {
	rest = skipSpaces(rest)
	if len(rest) == 0 {
		req.Keys = req.Keys[:0]
		return n, ErrBadFormat
	}
	if ntok+1 > metaMaxTokens {
		req.Keys = req.Keys[:0]
		return n, ErrMetaTooManyFlags
	}
	var lenTok []byte
	lenTok, rest = nextToken(rest)
	vlen, ok := ParseInt32(lenTok)
	if !ok || vlen < 0 || vlen > 1<<31-1-2 {
		req.Keys = req.Keys[:0]
		return n, ErrBadFormat
	}
	total := n + int(vlen) + 2
	req.MetaFlags = rest
	mf, err := PreparseMeta(key, rest, ErrBadFormat)
	if err == nil && mf.OpaqueTooLong {
		err = ErrMetaOpaqueTooLong
	}
	if err == nil {
		switch mf.Mode {
		case 0, 'E', 'A', 'P', 'R', 'S':
		default:
			err = ErrMetaMsMode
		}
	}
	if err != nil {
		req.Keys = req.Keys[:0]
		return total, err
	}
	req.Quiet, req.Base64 = mf.Quiet, mf.Base64
	nkey := len(key)
	if mf.Base64 {
		var dec [MaxKeyLen]byte
		nkey = DecodeMetaKey(dec[:], key)
	}
	if ItemSize(nkey, mf.ClientFlags, int(vlen)) > lim.ItemLimit() {
		return total, ErrTooLarge // Keys stay set: memcached unlinks the key
	}
	if len(buf) < total {
		req.Keys = req.Keys[:0]
		return total, ErrIncomplete
	}
	if buf[total-2] != '\r' || buf[total-1] != '\n' {
		req.Keys = req.Keys[:0]
		return total, ErrBadDataChunk
	}
	req.Data = buf[n : n+int(vlen)]
	return total, nil
}

// appendMetaWire is AppendWire for the meta commands: the line as the
// client sent it, the data block of ms, and "mn" after a quiet request (see
// Request.Quiet).
func (r *Request) appendMetaWire(dst []byte) []byte {
	if r.Cmd == CmdMn {
		return append(dst, "mn\r\n"...)
	}
	dst = append(dst, r.Line...)
	dst = append(dst, "\r\n"...)
	if r.Cmd == CmdMs {
		dst = append(dst, r.Data...)
		dst = append(dst, "\r\n"...)
	}
	if r.Quiet {
		dst = append(dst, "mn\r\n"...)
	}
	return dst
}

// base64Alphabet is standard base64's alphabet.
const base64Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// base64Table is memcached's base64 decoding table: 0x80 for bytes outside
// the alphabet (skipped), '=' decodes as 0.
var base64Table = func() (t [256]byte) {
	for i := range t {
		t[i] = 0x80
	}
	for i := 0; i < len(base64Alphabet); i++ {
		t[base64Alphabet[i]] = byte(i)
	}
	t['='] = 0
	return t
}()

// DecodeMetaKey decodes a b-flagged key into dst exactly as memcached
// 1.6.18's base64_decode does (bytes outside the alphabet are skipped, the
// first padded block ends the input) and returns the decoded length; 0
// means the key does not decode ("CLIENT_ERROR error decoding key"). dst
// must hold len(src)*3/4 bytes.
func DecodeMetaKey(dst, src []byte) int {
	count := 0
	for _, c := range src {
		if base64Table[c] != 0x80 {
			count++
		}
	}
	if count == 0 || count%4 != 0 || count/4*3 > len(dst) {
		return 0
	}
	pos, pad := 0, 0
	var block [4]byte
	count = 0
	for _, c := range src {
		v := base64Table[c]
		if v == 0x80 {
			continue
		}
		if c == '=' {
			pad++
		}
		block[count] = v
		count++
		if count == 4 {
			dst[pos] = block[0]<<2 | block[1]>>4
			dst[pos+1] = block[1]<<4 | block[2]>>2
			dst[pos+2] = block[2]<<6 | block[3]
			pos += 3
			count = 0
			if pad > 0 {
				if pad > 2 {
					return 0
				}
				pos -= pad
				break
			}
		}
	}
	return pos
}

// AppendMetaKey appends key as a meta reply's k flag shows it: "k<key>", or
// "k<base64 key> b" for a binary (b) key given decoded.
func AppendMetaKey(dst, key []byte, binary bool) []byte {
	dst = append(dst, 'k')
	if !binary {
		return append(dst, key...)
	}
	return append(AppendBase64(dst, key), " b"...)
}

// AppendBase64 appends key in standard, padded base64.
func AppendBase64(dst, key []byte) []byte {
	for i := 0; i < len(key); i += 3 {
		var b [3]byte
		n := copy(b[:], key[i:])
		dst = append(dst, base64Alphabet[b[0]>>2], base64Alphabet[(b[0]&3)<<4|b[1]>>4])
		if n > 1 {
			dst = append(dst, base64Alphabet[(b[1]&15)<<2|b[2]>>6])
		} else {
			dst = append(dst, '=')
		}
		if n > 2 {
			dst = append(dst, base64Alphabet[b[2]&63])
		} else {
			dst = append(dst, '=')
		}
	}
	return dst
}
