package dv

import (
	"fmt"
)

// z85Alphabet is the ZeroMQ Z85 alphabet (RFC 32/Z85) the Delta protocol
// uses to put binary data (inline bitmaps, UUIDs) into JSON strings.
const z85Alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"

var z85Decode = func() [256]byte {
	var t [256]byte
	for i := range t {
		t[i] = 0xff
	}
	for i := 0; i < len(z85Alphabet); i++ {
		t[z85Alphabet[i]] = byte(i)
	}
	return t
}()

// EncodeZ85 encodes b as Z85. Z85 works on 4-byte groups, so b is padded
// with zero bytes to a multiple of 4; callers that need the exact length
// keep it separately (the descriptor's sizeInBytes does that for inline DVs).
func EncodeZ85(b []byte) string {
	n := (len(b) + 3) / 4
	out := make([]byte, 0, n*5)
	for i := 0; i < n; i++ {
		var v uint32
		for j := 0; j < 4; j++ {
			v <<= 8
			if k := i*4 + j; k < len(b) {
				v |= uint32(b[k])
			}
		}
		var grp [5]byte
		for j := 4; j >= 0; j-- {
			grp[j] = z85Alphabet[v%85]
			v /= 85
		}
		out = append(out, grp[:]...)
	}
	return string(out)
}

// DecodeZ85 decodes a Z85 string whose length is a multiple of 5 into
// 4 bytes per 5 characters.
func DecodeZ85(s string) ([]byte, error) {
	if len(s)%5 != 0 {
		return nil, fmt.Errorf("decode z85: length %d is not a multiple of 5", len(s))
	}
	out := make([]byte, 0, len(s)/5*4)
	for i := 0; i < len(s); i += 5 {
		var v uint64
		for j := 0; j < 5; j++ {
			d := z85Decode[s[i+j]]
			if d == 0xff {
				return nil, fmt.Errorf("decode z85: invalid character %q at %d", s[i+j], i+j)
			}
			v = v*85 + uint64(d)
		}
		if v > 0xffffffff {
			return nil, fmt.Errorf("decode z85: group at %d overflows 32 bits", i)
		}
		out = append(out, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return out, nil
}
