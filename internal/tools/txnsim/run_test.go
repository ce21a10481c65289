package txnsim

import (
	"testing"
	"time"
)

func TestSmokeMicro(t *testing.T) {
	res, err := Run(Options{Seed: 1, Workload: Micro, GlobalPct: 10, Duration: 5 * time.Second, Quiesce: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Stats.Summary() {
		t.Logf("%+v", c)
	}
	t.Logf("converged=%v %s stuck=%d events=%d reordered=%d votes=%d resub=%d", res.Converged, res.Divergence, res.Stuck, res.Events, res.Stats.Reordered, res.Stats.VotesSent, res.Stats.Resubmits)
	if !res.Converged {
		t.Fatal(res.Divergence)
	}
}
