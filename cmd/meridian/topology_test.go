package main

import (
	"slices"
	"testing"
)

func TestLoadTopologySelectsRegions(t *testing.T) {
	first3, err := loadTopology("ec2-7:3")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(first3.Regions, []string{"ireland", "california", "virginia"}) {
		t.Fatalf("ec2-7:3 = %v: want the first three regions of Table 4.1", first3.Regions)
	}
	named, err := loadTopology("ec2-7:ireland+frankfurt")
	if err != nil {
		t.Fatal(err)
	}
	if rtt, _ := named.RTTMs("ireland", "frankfurt"); rtt != 22 || len(named.Regions) != 2 {
		t.Fatalf("ec2-7:ireland+frankfurt = %v with RTT %v: want two regions 22 ms apart", named.Regions, rtt)
	}
	for _, bad := range []string{"ec2-7:0", "ec2-7:8", "ec2-7:mars", "nowhere:3"} {
		if _, err := loadTopology(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
