package bench

import (
	"context"
	"testing"
	"time"
)

// A node's capacity queues work one slot after another and refuses a backlog beyond
// maxQueue.
func TestCapacityQueues(t *testing.T) {
	c := &capacity{per: time.Second}
	first, ok := c.reserve()
	if !ok {
		t.Fatal("first slot refused")
	}
	second, _ := c.reserve()
	if d := second.Sub(first); d != time.Second {
		t.Fatalf("slots %v apart, want 1s", d)
	}
	for range 10 {
		c.reserve()
	}
	if _, ok := c.reserve(); ok {
		t.Fatal("a backlog beyond maxQueue was accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c2 := &capacity{per: time.Hour}
	c2.reserve()
	if err := c2.wait(ctx); err == nil {
		t.Fatal("wait ignored a cancelled context")
	}
}
