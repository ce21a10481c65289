package topology

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestBuiltinNames(t *testing.T) {
	want := []string{"ec2-7", "ec2-globlease-4", "ec2-sdur-3", "equidistant", "gcp-meteorshower-3", "lan-3"}
	if got := BuiltinNames(); !reflect.DeepEqual(got, want) {
		t.Fatalf("BuiltinNames() = %v, want %v", got, want)
	}
}

func TestBuiltinsAreComplete(t *testing.T) {
	for _, name := range BuiltinNames() {
		t.Run(name, func(t *testing.T) {
			topo, err := Builtin(name)
			if err != nil {
				t.Fatal(err)
			}
			if topo.Name != name {
				t.Fatalf("Name = %q, want %q", topo.Name, name)
			}
			if topo.Source == "" {
				t.Error("Source is empty")
			}
			if len(topo.Regions) < 2 {
				t.Fatalf("only %d regions", len(topo.Regions))
			}
			for _, a := range topo.Regions {
				if !topo.HasRegion(a) {
					t.Errorf("HasRegion(%q) = false", a)
				}
				for _, b := range topo.Regions {
					ab, err := topo.RTTChecked(a, b)
					if err != nil {
						t.Fatalf("RTT(%s, %s): %v", a, b, err)
					}
					ba := topo.RTT(b, a)
					if ab != ba {
						t.Errorf("RTT(%s, %s) = %v but RTT(%s, %s) = %v", a, b, ab, b, a, ba)
					}
					if a != b && ab <= 0 {
						t.Errorf("RTT(%s, %s) = %v, want > 0 between distinct regions", a, b, ab)
					}
					if a == b && (ab <= 0 || ab >= time.Millisecond) {
						t.Errorf("intra-region RTT of %s = %v, want in (0, 1ms)", a, ab)
					}
					if ow := topo.OneWay(a, b); ow != ab/2 {
						t.Errorf("OneWay(%s, %s) = %v, want RTT/2 = %v", a, b, ow, ab/2)
					}
				}
			}
			// The spec round-trips.
			again, err := New(topo.Spec())
			if err != nil {
				t.Fatalf("New(Spec()): %v", err)
			}
			if !reflect.DeepEqual(again, topo) {
				t.Errorf("New(Spec()) differs from the original")
			}
		})
	}
}

func TestBuiltinValues(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		topo, a, b string
		rtt        time.Duration
	}{
		{"gcp-meteorshower-3", "europe", "asia", 250 * ms},
		{"gcp-meteorshower-3", "asia", "europe", 250 * ms},
		{"gcp-meteorshower-3", "europe", "us", 100 * ms},
		{"gcp-meteorshower-3", "us", "asia", 150 * ms},
		{"gcp-meteorshower-3", "asia", "asia", 500 * time.Microsecond},
		{"ec2-7", "sydney", "frankfurt", 322 * ms},
		{"ec2-7", "frankfurt", "ireland", 22 * ms},
		{"ec2-7", "tokyo", "tokyo", 130 * time.Microsecond},
		{"ec2-globlease-4", "tokyo", "ireland", 243 * ms},
		{"ec2-sdur-3", "us-west", "eu", 170 * ms},
		{"equidistant", "dc3", "dc1", 100 * ms},
	}
	for _, c := range cases {
		topo, err := Builtin(c.topo)
		if err != nil {
			t.Fatal(err)
		}
		if got := topo.RTT(c.a, c.b); got != c.rtt {
			t.Errorf("%s: RTT(%s, %s) = %v, want %v", c.topo, c.a, c.b, got, c.rtt)
		}
	}
	gcp, _ := Builtin("gcp-meteorshower-3")
	if got := gcp.OneWay("europe", "asia"); got != 125*ms {
		t.Errorf("OneWay(europe, asia) = %v, want 125ms", got)
	}
	if want := []string{"europe", "us", "asia"}; !reflect.DeepEqual(gcp.Regions, want) {
		t.Errorf("Regions = %v, want %v (file order)", gcp.Regions, want)
	}
	if gcp.SweepRTTMs != nil {
		t.Errorf("SweepRTTMs = %v, want nil", gcp.SweepRTTMs)
	}
	eq, _ := Builtin("equidistant")
	if want := []float64{0, 50, 100, 200, 300, 400, 500}; !reflect.DeepEqual(eq.SweepRTTMs, want) {
		t.Errorf("equidistant SweepRTTMs = %v, want %v", eq.SweepRTTMs, want)
	}
}

func TestBuiltinReturnsCopies(t *testing.T) {
	a, _ := Builtin("ec2-7")
	a.Regions[0] = "changed"
	b, _ := Builtin("ec2-7")
	if b.Regions[0] != "ireland" {
		t.Fatalf("modifying one Builtin result changed another: %v", b.Regions)
	}
}

func TestBuiltinUnknown(t *testing.T) {
	_, err := Builtin("mars-1")
	if err == nil {
		t.Fatal("no error for an unknown built-in")
	}
	for _, name := range BuiltinNames() {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not list %q", err, name)
		}
	}
}

func TestUnknownRegion(t *testing.T) {
	topo, _ := Builtin("gcp-meteorshower-3")
	if topo.HasRegion("mars") {
		t.Error("HasRegion(mars) = true")
	}
	if _, err := topo.RTTChecked("europe", "mars"); err == nil || !strings.Contains(err.Error(), `"mars"`) {
		t.Errorf("RTTChecked(europe, mars) error = %v, want one naming mars", err)
	}
	if _, err := topo.OneWayChecked("mars", "europe"); err == nil {
		t.Error("OneWayChecked(mars, europe): no error")
	}
	defer func() {
		if recover() == nil {
			t.Error("RTT with an unknown region did not panic")
		}
	}()
	topo.RTT("mars", "europe")
}

func TestEquidistant(t *testing.T) {
	topo := Equidistant("sweep-200", []string{"a", "b", "c", "d"}, 200, 0.5)
	for _, x := range topo.Regions {
		for _, y := range topo.Regions {
			want := 200 * time.Millisecond
			if x == y {
				want = 500 * time.Microsecond
			}
			if got := topo.RTT(x, y); got != want {
				t.Errorf("RTT(%s, %s) = %v, want %v", x, y, got, want)
			}
		}
	}
	zero := Equidistant("zero", []string{"a", "b"}, 0, 0)
	if got := zero.RTT("a", "b"); got != 0 {
		t.Errorf("RTT = %v, want 0", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("Equidistant with a negative RTT did not panic")
		}
	}()
	Equidistant("bad", []string{"a", "b"}, -1, 0)
}

const good = `name: t
source: test
regions: [europe, us, asia]
intra_region_rtt_ms: {europe: 0.5, us: 0.5, asia: 0.5}
rtt_ms:
  europe: {us: 100, asia: 250}
  us:     {asia: 150}
`

func TestParseVariants(t *testing.T) {
	// Both directions, agreeing.
	topo, err := Parse([]byte(good+"  asia: {europe: 250, us: 150}\n"), "both.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := topo.RTT("asia", "us"); got != 150*time.Millisecond {
		t.Errorf("RTT = %v", got)
	}
	// Lower triangle only.
	topo, err = Parse([]byte(`name: low
regions: [a, b, c]
rtt_ms: {b: {a: 10}, c: {a: 20, b: 30}}
`), "low.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := topo.RTT("a", "c"); got != 20*time.Millisecond {
		t.Errorf("RTT(a, c) = %v", got)
	}
	// intra_region_rtt_ms absent: 0 everywhere.
	if got := topo.RTT("b", "b"); got != 0 {
		t.Errorf("intra RTT without intra_region_rtt_ms = %v, want 0", got)
	}
	// A single region needs no rtt_ms.
	if _, err := Parse([]byte("name: one\nregions: [local]\n"), "one.yaml"); err != nil {
		t.Errorf("single region: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, yaml string
		path, msg  string
	}{
		{"unknown top-level field", good + "colour: blue\n", "colour", "unknown field"},
		{"unknown region in rtt row", strings.Replace(good, "asia: 250}", "asia: 250, mars: 3}", 1), "rtt_ms.europe.mars", `unknown region "mars"`},
		{"unknown region as rtt key", good + "  mars: {us: 3}\n", "rtt_ms.mars", `unknown region "mars"`},
		{"missing pair", strings.Replace(good, ", asia: 250}", "}", 1), "rtt_ms.europe.asia", "missing"},
		{"conflicting directions", good + "  asia: {europe: 240}\n", "rtt_ms.europe.asia", "conflicts with rtt_ms.asia.europe"},
		{"negative rtt", strings.Replace(good, "us: 100", "us: -100", 1), "rtt_ms.europe.us", "between 0 and"},
		{"nan rtt", strings.Replace(good, "us: 100", "us: .nan", 1), "rtt_ms.europe.us", "finite"},
		{"infinite rtt", strings.Replace(good, "us: 100", "us: .inf", 1), "rtt_ms.europe.us", "finite"},
		{"huge rtt", strings.Replace(good, "us: 100", "us: 1e300", 1), "rtt_ms.europe.us", "between 0 and"},
		{"rtt not a number", strings.Replace(good, "us: 100", "us: far", 1), "rtt_ms.europe.us", "expected a number"},
		{"unknown region with empty row", good + "  us2: {}\n", "rtt_ms.us2", "unknown region"},
		{"self rtt", strings.Replace(good, "us:     {asia: 150}", "us:     {asia: 150, us: 1}", 1), "rtt_ms.us.us", "intra_region_rtt_ms"},
		{"intra missing a region", strings.Replace(good, ", asia: 0.5}", "}", 1), "intra_region_rtt_ms.asia", "missing"},
		{"intra unknown region", strings.Replace(good, "asia: 0.5}", "asia: 0.5, mars: 1}", 1), "intra_region_rtt_ms.mars", "unknown region"},
		{"intra negative", strings.Replace(good, "us: 0.5", "us: -0.5", 1), "intra_region_rtt_ms.us", "between 0 and"},
		{"duplicate region", strings.Replace(good, "[europe, us, asia]", "[europe, us, asia, us]", 1), "regions[3]", "duplicate"},
		{"empty region name", strings.Replace(good, "[europe, us, asia]", `[europe, us, asia, ""]`, 1), "regions[3]", "empty"},
		{"bad region name", strings.Replace(good, "[europe, us, asia]", `[europe, us, asia, "Mars Base"]`, 1), "regions[3]", "not a valid region name"},
		{"no regions", strings.Replace(good, "[europe, us, asia]", "[]", 1), "regions", "at least one"},
		{"missing name", strings.Replace(good, "name: t\n", "", 1), "name", "required"},
		{"bad name", strings.Replace(good, "name: t\n", "name: T T\n", 1), "name", "not a valid"},
		{"duplicate key", good + "  us: {asia: 150}\n", "rtt_ms.us", "duplicate key"},
		{"bad sweep", good + "sweep_rtt_ms: [0, -5]\n", "sweep_rtt_ms[1]", "between 0 and"},
		{"rtt_ms is a list", strings.Replace(good, "rtt_ms:\n  europe: {us: 100, asia: 250}\n  us:     {asia: 150}\n", "rtt_ms: [1, 2]\n", 1), "rtt_ms", "expected a mapping"},
		{"not a mapping", "[1, 2]\n", "", "expected a mapping"},
		{"empty", "", "", "empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.yaml), "case.yaml")
			if err == nil {
				t.Fatalf("no error; want %s: %s", c.path, c.msg)
			}
			var te *Error
			if !errors.As(err, &te) {
				t.Fatalf("error %q is a %T, want *Error", err, err)
			}
			if te.Path != c.path {
				t.Errorf("Path = %q, want %q (error: %v)", te.Path, c.path, err)
			}
			if c.path != "" && !strings.Contains(err.Error(), c.path+": ") {
				t.Errorf("error %q does not name %q", err, c.path)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q does not contain %q", err, c.msg)
			}
			if !strings.Contains(err.Error(), "case.yaml") {
				t.Errorf("error %q does not name the source", err)
			}
		})
	}
}

func TestErrorFormat(t *testing.T) {
	_, err := Parse([]byte(strings.Replace(good, "asia: 250}", "asia: 250, mars: 3}", 1)), "gcp-x.yaml")
	want := `topology t (gcp-x.yaml:6): rtt_ms.europe.mars: unknown region "mars"`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error = %v, want prefix %q", err, want)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "t.yaml")
	if err := os.WriteFile(p, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	topo, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if topo.RTT("europe", "asia") != 250*time.Millisecond {
		t.Errorf("RTT = %v", topo.RTT("europe", "asia"))
	}
	if _, err := Load(dir); err == nil {
		t.Error("Load of a directory: no error")
	}
	if _, err := Load(filepath.Join(dir, "none.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file: %v, want ErrNotExist", err)
	}
}

func TestSubsetKeepsTheRTTsOfTheRegionsItNames(t *testing.T) {
	ec2, err := Builtin("ec2-7")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := ec2.Subset("ec2-7-3", []string{"tokyo", "ireland", "frankfurt"})
	if err != nil {
		t.Fatal(err)
	}
	if got := sub.Regions; len(got) != 3 || got[0] != "tokyo" || got[2] != "frankfurt" {
		t.Fatalf("regions %v: want the order given", got)
	}
	for _, p := range [][2]string{{"tokyo", "ireland"}, {"ireland", "frankfurt"}, {"frankfurt", "tokyo"}, {"tokyo", "tokyo"}} {
		want, _ := ec2.RTTMs(p[0], p[1])
		if got, _ := sub.RTTMs(p[0], p[1]); got != want {
			t.Errorf("RTT %s–%s: %v, want %v (the full table's)", p[0], p[1], got, want)
		}
	}
	if sub.HasRegion("sydney") {
		t.Error("sydney is not in the subset")
	}
	for _, bad := range [][]string{nil, {"mars"}, {"tokyo", "tokyo"}} {
		if _, err := ec2.Subset("x", bad); err == nil {
			t.Errorf("subset %v: no error", bad)
		}
	}
}
