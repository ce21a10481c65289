package canopus

import (
	"fmt"
	"testing"
	"time"
)

// exclusionOptions are testOptions with region exclusion on.
func exclusionOptions() Options {
	o := testOptions()
	o.ExcludeAfter = time.Second
	return o
}

// heldEverywhere checks the ack rule's promise: every cycle a node committed is held (in the
// logs) or committed by every node of every other super-leaf. It returns the first breach.
func heldEverywhere(c *testCluster) error {
	for _, x := range c.ids() {
		vx, _ := c.nodes[x].lot.Ancestor(x, 1)
		for _, cm := range c.committed[x] {
			for _, y := range c.ids() {
				ny := c.nodes[y]
				if vy, _ := ny.lot.Ancestor(y, 1); vy == vx || c.down[y] {
					continue
				}
				if ny.committed < cm.Cycle && ny.states[vkey{cm.Cycle, vx}] == nil {
					return fmt.Errorf("node %d committed cycle %d, which node %d (committed %d) does not hold %v's state of", x, cm.Cycle, y, ny.committed, vx)
				}
			}
		}
	}
	return nil
}

// TestAckRule: with exclusion on, cycles still commit, and a super-leaf whose messages to
// another cannot get through commits nothing that one does not hold; with the ack rule off
// (MutationCommitWithoutAck) it does, and the check sees it.
func TestAckRule(t *testing.T) {
	for _, mutation := range []string{"", MutationCommitWithoutAck} {
		t.Run("mutation="+mutation, func(t *testing.T) {
			c := newClusterIn(t, []string{"r1", "r2", "r3"}, 1, nil, exclusionOptions(), mutation)
			c.run(300 * time.Millisecond)
			write := func(n int) {
				for _, id := range c.ids() {
					for i := range n {
						k := []byte(fmt.Sprintf("k%d-%d", id, i))
						c.nodes[id].Write(c.now, k, k)
					}
					c.flush(id)
				}
			}
			write(3)
			c.run(200 * time.Millisecond)
			if len(c.committed[11]) == 0 || len(c.committed[31]) == 0 {
				t.Fatalf("no cycle committed with exclusion on: %d, %d", len(c.committed[11]), len(c.committed[31]))
			}
			if err := heldEverywhere(c); err != nil {
				t.Fatalf("without faults: %v", err)
			}
			before := len(c.committed[11])
			c.cut[[2]uint32{11, 21}] = true // r1's messages to r2 are lost; r2's reach r1
			var breach error
			c.onDeliver = func(uint32, Message) {
				if breach == nil {
					breach = heldEverywhere(c)
				}
			}
			for range 20 {
				write(1)
				c.run(20 * time.Millisecond)
			}
			if breach == nil {
				breach = heldEverywhere(c)
			}
			switch {
			case mutation == "" && breach != nil:
				t.Fatalf("the ack rule broke: %v", breach)
			case mutation == "" && len(c.committed[11]) > before+1:
				t.Fatalf("node 11 committed %d more cycles while r2 could not hold its state", len(c.committed[11])-before)
			case mutation != "" && breach == nil:
				t.Fatalf("mutation %s: no node committed a cycle another super-leaf does not hold (the check cannot fail?)", mutation)
			}
			delete(c.cut, [2]uint32{11, 21})
			c.run(500 * time.Millisecond)
			if mutation == "" && len(c.committed[11]) <= before+1 {
				t.Fatalf("node 11 did not go on once the link healed (%d cycles)", len(c.committed[11]))
			}
		})
	}
}
