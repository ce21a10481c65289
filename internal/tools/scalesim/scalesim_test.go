package scalesim

import (
	"testing"
)

// Every policy runs over the trace; the oracle and ProRenaTa violate least, the reactive
// controller is late on the rising load and the flash crowds.
func TestCompare(t *testing.T) {
	rs, err := Compare(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + Markdown(Options{}, rs))
	by := map[string]Result{}
	for _, r := range rs {
		by[r.Policy] = r
	}
	for _, other := range []string{"reactive (HPA)", "step"} {
		if by["prorenata"].ViolationShare >= by[other].ViolationShare {
			t.Errorf("prorenata violates in %.1f%% of the periods, %s in %.1f%%", 100*by["prorenata"].ViolationShare, other, 100*by[other].ViolationShare)
		}
	}
	if by["oracle"].NodeSeconds >= by["prorenata"].NodeSeconds {
		t.Errorf("the oracle used more node-seconds (%.0f) than prorenata (%.0f)", by["oracle"].NodeSeconds, by["prorenata"].NodeSeconds)
	}
}
