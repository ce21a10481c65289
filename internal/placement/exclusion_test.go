package placement

import "testing"

func TestExclusionIsDecidedAtTheHighestReportOnceEveryOtherRegionReported(t *testing.T) {
	c := testCluster(t, 1, 1, 2)
	m, err := Build(c)
	if err != nil {
		t.Fatal(err)
	}
	ks, _ := m.Keyspace("ks")
	id := ks.Partitions[0].ID
	started, err := ks.StartExclusion(id, "asia", 7)
	if err != nil {
		t.Fatal(err)
	}
	if ks.Partitions[0].Exclusion != nil {
		t.Fatal("StartExclusion changed the keyspace it was called on (keyspaces are immutable)")
	}
	if again, err := started.StartExclusion(id, "asia", 7); err != nil || again != started {
		t.Fatalf("starting the same exclusion again: %v (want a no-op)", err)
	}
	if _, err := started.StartExclusion(id, "europe", 8); err == nil {
		t.Fatal("a second region's exclusion started while one is pending: two sides of a partition could exclude each other")
	}
	if _, err := started.StartExclusion(ks.Partitions[1].ID, "mars", 9); err == nil {
		t.Fatal("excluding a region the keyspace has no replicas in: no error")
	}
	for _, bad := range []struct {
		region, reporter string
		pos              uint64
	}{{"asia", "asia", 5}, {"asia", "mars", 5}, {"europe", "us", 5}, {"asia", "us", 0}} {
		if _, err := started.ReportExclusion(id, bad.region, 7, bad.reporter, bad.pos); err == nil {
			t.Errorf("report %+v: no error", bad)
		}
	}
	one, err := started.ReportExclusion(id, "asia", 7, "europe", 12)
	if err != nil {
		t.Fatal(err)
	}
	if one.Partitions[0].Exclusion.Decided() {
		t.Fatal("decided with one of two reports: us may hold asia's state of cycles past 12")
	}
	if same, _ := one.ReportExclusion(id, "asia", 7, "europe", 99); same.Partitions[0].Exclusion.Reports["europe"] != 12 {
		t.Fatal("a region's second report replaced its first")
	}
	two, err := one.ReportExclusion(id, "asia", 7, "us", 15)
	if err != nil {
		t.Fatal(err)
	}
	if ex := two.Partitions[0].Exclusion; !ex.Decided() || ex.From != 15 {
		t.Fatalf("exclusion %+v: want decided from 15, the highest report", ex)
	}
	if one.Partitions[0].Exclusion.Decided() {
		t.Fatal("ReportExclusion changed the keyspace it was called on")
	}
}

func TestACancelledAttemptCountsForNothing(t *testing.T) {
	c := testCluster(t, 1, 1, 1)
	m, err := Build(c)
	if err != nil {
		t.Fatal(err)
	}
	ks, _ := m.Keyspace("ks")
	id := ks.Partitions[0].ID
	first, _ := ks.StartExclusion(id, "asia", 7)
	reported, _ := first.ReportExclusion(id, "asia", 7, "europe", 3)
	if _, err := reported.CancelExclusion(id, "asia", 6); err == nil {
		t.Fatal("cancelled another attempt")
	}
	cancelled, err := reported.CancelExclusion(id, "asia", 7)
	if err != nil || cancelled.Partitions[0].Exclusion != nil || cancelled.Partitions[0].ExclusionCancelled != 7 {
		t.Fatalf("cancel: %v, %+v", err, cancelled.Partitions[0].Exclusion)
	}
	// Another region's exclusion may start now, and a late report of attempt 7 counts for
	// nothing in it.
	second, err := cancelled.StartExclusion(id, "us", 11)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.ReportExclusion(id, "us", 7, "europe", 3); err == nil {
		t.Fatal("a report of the cancelled attempt counted in the next one")
	}
	decided, _ := second.ReportExclusion(id, "us", 11, "europe", 4)
	decided, _ = decided.ReportExclusion(id, "us", 11, "asia", 5)
	if _, err := decided.CancelExclusion(id, "us", 11); err == nil {
		t.Fatal("cancelled a decided exclusion")
	}
}
