package repro

import (
	"context"
	"testing"
	"time"
)

// A short closed loop on the emulated cluster: the calibrated capacity is positive, the load
// calls for more nodes than the region has, so ProRenaTa starts a join through the emulated
// actuator, and the day's windows are measured. (The figures are `meridian bench autoscale
// --emulated`'s; no duration is asserted.)
func TestAutoscaleEmulatedJoins(t *testing.T) {
	if testing.Short() {
		t.Skip("emulated cluster")
	}
	res, err := AutoscaleEmulated(context.Background(), AutoscaleOptions{Policies: []string{"prorenata"}, Season: 4, Period: time.Second,
		Low: 900, High: 1500, StartNodes: 2, MaxNodes: 3, Records: 4000, RecordBytes: 512})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Runs[0]
	if r.CapacityPerNode <= 0 || r.Windows == 0 {
		t.Fatalf("capacity %v, %d windows", r.CapacityPerNode, r.Windows)
	}
	joined := false
	for _, a := range r.Actions {
		joined = joined || (a.Kind == "join" && a.To > a.From)
	}
	if !joined {
		t.Fatalf("a load of 900-1500 ops/s on 2 nodes of %.0f ops/s started no join: %+v", r.CapacityPerNode, r.Actions)
	}
	t.Log("\n" + res.Markdown())
}
