package ycsb

import "strconv"

// FNV-64 constants, as in YCSB's Utils.FNV_OFFSET_BASIS_64 and Utils.FNV_PRIME_64.
const (
	fnvOffsetBasis64 = 0xCBF29CE484222325
	fnvPrime64       = 1099511628211
)

// javaMinLong is Long.MIN_VALUE reinterpreted as uint64: the one value Math.abs cannot negate.
const javaMinLong = uint64(1) << 63

// FNVHash64 is YCSB's Utils.fnvhash64 (also Utils.hash): FNV-1a over the 8 little-endian bytes
// of val, then Math.abs of the result taken as a signed Java long. The result is therefore below
// 2^63, except when the hash is exactly Long.MIN_VALUE, which Math.abs leaves unchanged; that
// value is returned as 1<<63 (its two's-complement bits).
func FNVHash64(val uint64) uint64 {
	h := uint64(fnvOffsetBasis64)
	for range 8 {
		h ^= val & 0xff
		val >>= 8 // Java's arithmetic >> differs only in bits that are never read
		h *= fnvPrime64
	}
	if int64(h) < 0 {
		h = -h // Math.abs; -(1<<63) == 1<<63, as in Java
	}
	return h
}

// KeyName is YCSB's CoreWorkload.buildKeyName(keynum, zeropadding=1, orderedinserts): "user"
// followed by the decimal keynum (ordered) or by the decimal FNVHash64(keynum) (hashed, YCSB's
// default insertorder). With the default zero padding of 1 nothing is padded: ordered
// KeyName(5) is "user5" and hashed KeyName(0) is "user6284781860667377211". It allocates; hot
// paths use [AppendKeyName].
func KeyName(keynum uint64, ordered bool) []byte {
	return AppendKeyName(nil, keynum, ordered, 1)
}

// AppendKeyName appends CoreWorkload.buildKeyName(keynum, zeroPadding, ordered) to dst and
// returns the extended slice. zeroPadding is YCSB's zeropadding property: the decimal number is
// left-padded with '0' to at least that many characters (YCSB's example: row 5 with zeropadding
// 8 is "user00000005"); values ≤ 1 pad nothing.
func AppendKeyName(dst []byte, keynum uint64, ordered bool, zeroPadding int) []byte {
	dst = append(dst, "user"...)
	var num [24]byte
	var digits []byte
	if ordered {
		digits = strconv.AppendUint(num[:0], keynum, 10)
	} else {
		h := FNVHash64(keynum)
		if h == javaMinLong {
			// Long.toString(Long.MIN_VALUE), which is what YCSB would print.
			digits = append(num[:0], "-9223372036854775808"...)
		} else {
			digits = strconv.AppendUint(num[:0], h, 10)
		}
	}
	for fill := zeroPadding - len(digits); fill > 0; fill-- {
		dst = append(dst, '0')
	}
	return append(dst, digits...)
}
