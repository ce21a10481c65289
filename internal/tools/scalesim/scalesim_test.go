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

// Hubbub-scale: with two nodes slowed 1.5× and 2× for half a day, the aware controller breaks
// the SLO in fewer periods than the oblivious one and detects each slowdown within two periods.
func TestInterferenceAwareBeatsOblivious(t *testing.T) {
	rs, err := CompareInterference(Options{Days: 3}, InterferenceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	obl, aware := rs[0], rs[1]
	if !(aware.ViolationShare < obl.ViolationShare) {
		t.Fatalf("aware %.3f violations, oblivious %.3f", aware.ViolationShare, obl.ViolationShare)
	}
	for k, d := range aware.DetectionPeriods {
		if d < 0 || d > 2 {
			t.Fatalf("slowed node %d detected after %d periods", k, d)
		}
	}
	t.Log("\n" + InterferenceMarkdown(rs))
}
