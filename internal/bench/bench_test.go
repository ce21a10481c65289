package bench

import (
	"testing"

	"meridian/internal/topology"
)

func TestLowerBound(t *testing.T) {
	topo, _ := topology.Builtin("gcp-meteorshower-3")
	cases := []struct {
		region      string
		read, write string
		wantR       float64
		wantW       float64
	}{
		{"europe", "QUORUM", "QUORUM", 100, 100},
		{"asia", "QUORUM", "QUORUM", 150, 150},
		{"europe", "ALL", "ONE", 250, 0},
		{"us", "ALL", "ONE", 150, 0},
		{"asia", "LOCAL_ONE", "ALL", 0, 250},
	}
	for _, c := range cases {
		cfg := Config{Protocol: "quorum", ReadLevel: c.read, WriteLevel: c.write}
		if r, w := LowerBoundMs(topo, cfg, c.region, "read"), LowerBoundMs(topo, cfg, c.region, "write"); r != c.wantR || w != c.wantW {
			t.Errorf("%s %s/%s: bounds %v/%v, want %v/%v", c.region, c.read, c.write, r, w, c.wantR, c.wantW)
		}
	}
}

func TestParseConfigs(t *testing.T) {
	cfgs, err := ParseConfigs("quorum, quorum:ALL/ONE ; meteorshower:QUORUM/QUORUM:theta=upper+interval=2ms")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfgs) != 3 || cfgs[0].ReadLevel != "QUORUM" || cfgs[1].WriteLevel != "ONE" ||
		cfgs[2].Options["theta"] != "upper" || cfgs[2].Options["interval"] != "2ms" {
		t.Fatalf("%+v", cfgs)
	}
	for _, bad := range []string{"", "quorum:ALL", "quorum:A/B:x", "quorum:A/B:x=1:extra"} {
		if _, err := ParseConfigs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
