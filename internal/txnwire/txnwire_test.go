package txnwire

import (
	"strings"
	"testing"
)

// TestChecks: each check refuses out-of-bounds input with a message naming the bound, and
// accepts what is within it.
func TestChecks(t *testing.T) {
	l := Limits{MaxKeys: 2, MaxKeyBytes: 3, MaxValueBytes: 4, MaxPartitions: 2}
	for _, c := range []struct {
		err  error
		want string
	}{
		{l.CheckPartitions(nil), "0 partitions"},
		{l.CheckPartitions([]uint32{0, 1, 2}), "3 partitions"},
		{l.CheckPartitions([]uint32{1, 1}), "not strictly ascending"},
		{l.CheckKeys(3), "above the limit of 2"},
		{l.CheckKey("read", nil), "a read key of 0 bytes"},
		{l.CheckKey("written", []byte("abcd")), "a written key of 4 bytes"},
		{l.CheckValue([]byte("abcde")), "a value of 5 bytes"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("got %v, want an error containing %q", c.err, c.want)
		}
	}
	for _, err := range []error{l.CheckPartitions([]uint32{0, 3}), l.CheckKeys(2), l.CheckKey("read", []byte("abc")), l.CheckValue([]byte("abcd"))} {
		if err != nil {
			t.Errorf("within bounds refused: %v", err)
		}
	}
}
