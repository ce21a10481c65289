package repro

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The product benchmark runs catenae keyspaces on real nodes over the emulated WAN: both
// workloads commit in every region, and the table has a row per region and one for all.
func TestCatenaeProductRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an emulated cluster")
	}
	res, err := CatenaeProduct(context.Background(), CatenaeProductOptions{Topologies: []string{"ec2-sdur-3"}, Duration: 500 * time.Millisecond,
		Warmup: 300 * time.Millisecond, ClientsPerRegion: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 2*4 {
		t.Fatalf("%d rows, want 4 (3 regions and all) per workload", len(res.Rows))
	}
	for _, r := range res.Rows {
		if r.ThroughputTPS <= 0 {
			t.Errorf("%s %s: nothing committed", r.Workload, r.Region)
		}
		if r.Region != "all" && r.HalfRTTMs <= 0 {
			t.Errorf("%s %s: no bound", r.Workload, r.Region)
		}
	}
	if md := res.Markdown(); !strings.Contains(md, "| ec2-sdur-3 | rmw | all |") {
		t.Errorf("markdown:\n%s", md)
	}
}
