// Package txnwire holds the checks the transaction protocols' decoders share (internal/sdur,
// internal/twopc): what a decoded part may hold, so that bytes from the network or a disk
// reach a state machine only within these bounds, refused with an error naming the field.
package txnwire

import "fmt"

// Limits bound what a decoded transaction part may hold.
type Limits struct {
	MaxKeys       int // reads + writes of one part
	MaxKeyBytes   int
	MaxValueBytes int
	MaxPartitions int
}

// DefaultLimits are the decoders' limits unless the runtime gives others.
var DefaultLimits = Limits{MaxKeys: 1024, MaxKeyBytes: 4096, MaxValueBytes: 1 << 20, MaxPartitions: 256}

// CheckPartitions: 1 to MaxPartitions partitions, strictly ascending.
func (l Limits) CheckPartitions(ps []uint32) error {
	if len(ps) == 0 || len(ps) > l.MaxPartitions {
		return fmt.Errorf("%d partitions (1 to %d allowed)", len(ps), l.MaxPartitions)
	}
	for i := 1; i < len(ps); i++ {
		if ps[i] <= ps[i-1] {
			return fmt.Errorf("partitions %v are not strictly ascending", ps)
		}
	}
	return nil
}

// CheckKeys: at most MaxKeys keys in a part.
func (l Limits) CheckKeys(n int) error {
	if n > l.MaxKeys {
		return fmt.Errorf("%d keys, above the limit of %d", n, l.MaxKeys)
	}
	return nil
}

// CheckKey: a key of 1 to MaxKeyBytes bytes; what names it ("read", "written").
func (l Limits) CheckKey(what string, k []byte) error {
	if len(k) == 0 || len(k) > l.MaxKeyBytes {
		return fmt.Errorf("a %s key of %d bytes (1 to %d allowed)", what, len(k), l.MaxKeyBytes)
	}
	return nil
}

// CheckValue: a value of at most MaxValueBytes bytes.
func (l Limits) CheckValue(v []byte) error {
	if len(v) > l.MaxValueBytes {
		return fmt.Errorf("a value of %d bytes, above the limit of %d", len(v), l.MaxValueBytes)
	}
	return nil
}
