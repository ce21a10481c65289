package ycsb

import (
	"slices"
	"strconv"
)

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

// splitSampleKeys is how many hashed key names SplitPoints sorts to find the quantiles.
const splitSampleKeys = 1 << 16

// SplitPoints returns partitions-1 boundaries that cut YCSB's hashed key names (the default
// insert order) into partitions ranges of about equal share, whatever the record count: the
// hash spreads key numbers uniformly over the decimal strings, so the quantiles of the first
// 65,536 key names are the quantiles of any key set. Every name starts with "user", so
// without them a range-partitioned keyspace holds every YCSB key in one partition (ElasCass
// 2.1's skew). nil for partitions <= 1. Each boundary is shortened to the shortest prefix
// that still separates its neighbours, for readability.
func SplitPoints(partitions int) []string {
	if partitions <= 1 {
		return nil
	}
	keys := make([]string, splitSampleKeys)
	for i := range keys {
		keys[i] = string(KeyName(uint64(i), false))
	}
	slices.Sort(keys)
	out := make([]string, 0, partitions-1)
	for i := 1; i < partitions; i++ {
		j := i * len(keys) / partitions
		prev, cut := keys[j-1], keys[j]
		// The shortest prefix of cut that is still greater than prev: keys below it stay left.
		n := len("user") + 1
		for n < len(cut) && cut[:n] <= prev {
			n++
		}
		b := cut[:n]
		if len(out) > 0 && b <= out[len(out)-1] {
			continue // too few distinct keys for this many partitions
		}
		out = append(out, b)
	}
	return out
}
