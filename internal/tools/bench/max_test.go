package bench

import (
	"bytes"
	"strings"
	"testing"
)

func TestWithinBaseBoundsEachRegionByItsOwnBase(t *testing.T) {
	base := Probe{RegionP50Ms: map[string]float64{"near": 10, "far": 200}}
	for _, c := range []struct {
		name string
		p50  map[string]float64
		want bool
	}{
		{"both under 1.5x", map[string]float64{"near": 14, "far": 290}, true},
		// 250 ms would pass a single bound set from the far region; near's base is 10 ms.
		{"near over its own bound", map[string]float64{"near": 16, "far": 250}, false},
		{"far over", map[string]float64{"near": 10, "far": 300}, false},
		{"a region with no completed operation", map[string]float64{"near": 10}, false},
	} {
		if got := withinBase(Probe{RegionP50Ms: c.p50}, base, 1.5); got != c.want {
			t.Errorf("%s: withinBase = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestMaxOptionsRejectAFactorThatCannotBeMet(t *testing.T) {
	for _, f := range []float64{-1, 0.5, 1} {
		mo := MaxOptions{P99BoundMs: 100, P50Factor: f}
		if err := mo.ensureDefaults(); err == nil {
			t.Errorf("p50 factor %v: no error", f)
		}
	}
	mo := MaxOptions{P99BoundMs: 100, P50Factor: 1.5, StartRatePerRegion: 100}
	if err := mo.ensureDefaults(); err != nil || mo.BaseRatePerRegion != 25 {
		t.Fatalf("ensureDefaults: %v, base rate %v: want nil and 25 (a quarter of the start)", err, mo.BaseRatePerRegion)
	}
}

func TestPrintMaxMediansShowsBaseBoundAndLoad70(t *testing.T) {
	var b bytes.Buffer
	PrintMaxMedians(&b, []*MaxResult{{Config: "no-base"}})
	if b.Len() != 0 {
		t.Fatalf("printed %q for a search without a relative bound", b.String())
	}
	r := &MaxResult{Config: "canopus", P50Factor: 1.5,
		Base:   &Probe{RegionP50Ms: map[string]float64{"us": 100}},
		Load70: &Probe{Achieved: 700, RegionP50Ms: map[string]float64{"us": 120}}}
	PrintMaxMedians(&b, []*MaxResult{r})
	for _, want := range []string{"canopus", "us", "100.0", "150.0", "700", "120.0"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}
