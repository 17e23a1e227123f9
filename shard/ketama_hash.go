package shard

import (
	"crypto/md5"
	"hash/crc32"
)

// KetamaHashFunc hashes a key to the 32-bit value Twemproxy 0.5.0 places on
// its continuum. Implementations are pure functions, safe for concurrent use
// and must not retain or modify the key.
type KetamaHashFunc func(key []byte) uint32

// Twemproxy reads keys through a (signed) char pointer and widens each byte
// before mixing it in, so on amd64, where Debian's nutcracker runs, bytes of
// 0x80 and above are sign-extended. The helpers below reproduce that exactly;
// it only matters for keys with non-ASCII bytes.
func signExt32(b byte) uint32 { return uint32(int32(int8(b))) }
func signExt64(b byte) uint64 { return uint64(int64(int8(b))) }

// KetamaHash returns the Twemproxy 0.5.0 hash named as in a nutcracker.yml
// "hash:" setting: one_at_a_time, md5, crc16, crc32, crc32a, fnv1_64,
// fnv1a_64, fnv1_32, fnv1a_32, hsieh, murmur or jenkins: all of Twemproxy's
// memcached hashes. The empty name is Twemproxy's default, fnv1a_64; any
// other name yields ErrKetamaHash.
func KetamaHash(name string) (KetamaHashFunc, error) {
	switch name {
	case "", "fnv1a_64":
		return hashFNV1a64, nil
	case "fnv1_64":
		return hashFNV164, nil
	case "fnv1a_32":
		return hashFNV1a32, nil
	case "fnv1_32":
		return hashFNV132, nil
	case "md5":
		return hashMD5, nil
	case "one_at_a_time":
		return hashOneAtATime, nil
	case "crc16":
		return hashCRC16, nil
	case "crc32":
		return hashCRC32, nil
	case "crc32a":
		return hashCRC32a, nil
	case "hsieh":
		return hashHsieh, nil
	case "murmur":
		return hashMurmur, nil
	case "jenkins":
		return hashJenkins, nil
	}
	return nil, errKetamaHash(name)
}

const (
	fnv64Init  = 0xcbf29ce484222325
	fnv64Prime = 0x100000001b3
	fnv32Init  = 2166136261
	fnv32Prime = 16777619
)

// hashFNV1a64 is Twemproxy's "fnv1a_64": despite the name it runs FNV-1a
// with the 64-bit constants truncated to 32 bits, in 32-bit arithmetic.
func hashFNV1a64(key []byte) uint32 {
	h := uint32(fnv64Init & 0xffffffff)
	for _, b := range key {
		h ^= signExt32(b)
		h *= uint32(fnv64Prime & 0xffffffff)
	}
	return h
}

// hashFNV164 is "fnv1_64": real 64-bit FNV-1, truncated to its low 32 bits.
func hashFNV164(key []byte) uint32 {
	h := uint64(fnv64Init)
	for _, b := range key {
		h *= fnv64Prime
		h ^= signExt64(b)
	}
	return uint32(h)
}

func hashFNV1a32(key []byte) uint32 {
	h := uint32(fnv32Init)
	for _, b := range key {
		h ^= signExt32(b)
		h *= fnv32Prime
	}
	return h
}

func hashFNV132(key []byte) uint32 {
	h := uint32(fnv32Init)
	for _, b := range key {
		h *= fnv32Prime
		h ^= signExt32(b)
	}
	return h
}

// md5Word is the little-endian 32-bit word number i (0..3) of an MD5 digest,
// as Twemproxy's ketama_hash and hash_md5 read it.
func md5Word(d *[md5.Size]byte, i int) uint32 {
	return uint32(d[4*i+3])<<24 | uint32(d[4*i+2])<<16 | uint32(d[4*i+1])<<8 | uint32(d[4*i])
}

func hashMD5(key []byte) uint32 {
	d := md5.Sum(key)
	return md5Word(&d, 0)
}

func hashOneAtATime(key []byte) uint32 {
	var v uint32
	for _, b := range key {
		v += signExt32(b)
		v += v << 10
		v ^= v >> 6
	}
	v += v << 3
	v ^= v >> 11
	v += v << 15
	return v
}

// crc16Table is the CCITT (XMODEM, polynomial 0x1021, MSB first) table.
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for j := 0; j < 8; j++ {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// hashCRC16 reproduces Twemproxy's crc16, whose 32-bit accumulator is never
// masked to 16 bits: the result keeps the shifted-out high bits.
func hashCRC16(key []byte) uint32 {
	var c uint32
	for _, b := range key {
		c = c<<8 ^ uint32(crc16Table[(c>>8^signExt32(b))&0xff])
	}
	return c
}

// hashCRC32 is Twemproxy's "crc32": 15 bits of the IEEE CRC-32
// (libmemcached compatible).
func hashCRC32(key []byte) uint32 {
	return crc32.ChecksumIEEE(key) >> 16 & 0x7fff
}

// hashCRC32a is Twemproxy's "crc32a": the full IEEE CRC-32.
func hashCRC32a(key []byte) uint32 { return crc32.ChecksumIEEE(key) }

func hashHsieh(key []byte) uint32 {
	if len(key) == 0 {
		return 0
	}
	get16 := func(p []byte) uint32 { return uint32(p[1])<<8 + uint32(p[0]) }
	var h uint32
	rem := len(key) & 3
	for n := len(key) >> 2; n > 0; n-- {
		h += get16(key)
		tmp := get16(key[2:])<<11 ^ h
		h = h<<16 ^ tmp
		key = key[4:]
		h += h >> 11
	}
	switch rem {
	case 3:
		h += get16(key)
		h ^= h << 16
		h ^= signExt32(key[2]) << 18
		h += h >> 11
	case 2:
		h += get16(key)
		h ^= h << 11
		h += h >> 17
	case 1:
		h += uint32(key[0])
		h ^= h << 10
		h += h >> 1
	}
	h ^= h << 3
	h += h >> 5
	h ^= h << 4
	h += h >> 17
	h ^= h << 25
	h += h >> 6
	return h
}

// hashMurmur is Twemproxy's "murmur" (MurmurHash2, little-endian reads, seed
// derived from the length).
func hashMurmur(key []byte) uint32 {
	const m = 0x5bd1e995
	n := uint32(len(key))
	h := 0xdeadbeef*n ^ n
	for len(key) >= 4 {
		k := uint32(key[0]) | uint32(key[1])<<8 | uint32(key[2])<<16 | uint32(key[3])<<24
		k *= m
		k ^= k >> 24
		k *= m
		h *= m
		h ^= k
		key = key[4:]
	}
	switch len(key) {
	case 3:
		h ^= uint32(key[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(key[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(key[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// hashJenkins is Twemproxy's "jenkins": Bob Jenkins' lookup3 hashlittle
// with initval 13 (little-endian byte order).
func hashJenkins(key []byte) uint32 {
	rot := func(x uint32, k uint) uint32 { return x<<k | x>>(32-k) }
	a := 0xdeadbeef + uint32(len(key)) + 13
	b, c := a, a
	le := func(p []byte) uint32 {
		var w uint32
		for i := len(p) - 1; i >= 0; i-- {
			w = w<<8 | uint32(p[i])
		}
		return w
	}
	for len(key) > 12 {
		a += le(key[0:4])
		b += le(key[4:8])
		c += le(key[8:12])
		a -= c
		a ^= rot(c, 4)
		c += b
		b -= a
		b ^= rot(a, 6)
		a += c
		c -= b
		c ^= rot(b, 8)
		b += a
		a -= c
		a ^= rot(c, 16)
		c += b
		b -= a
		b ^= rot(a, 19)
		a += c
		c -= b
		c ^= rot(b, 4)
		b += a
		key = key[12:]
	}
	if len(key) == 0 {
		return c
	}
	a += le(key[:min(4, len(key))])
	if len(key) > 4 {
		b += le(key[4:min(8, len(key))])
	}
	if len(key) > 8 {
		c += le(key[8:])
	}
	c ^= b
	c -= rot(b, 14)
	a ^= c
	a -= rot(c, 11)
	b ^= a
	b -= rot(a, 25)
	c ^= b
	c -= rot(b, 16)
	a ^= c
	a -= rot(c, 4)
	b ^= a
	b -= rot(a, 14)
	c ^= b
	c -= rot(b, 24)
	return c
}
