package ycsb

import (
	"strings"
	"testing"
)

// The values of YCSB's workloads/workloada..workloadf (and CoreWorkload's defaults for what
// those files leave unset).
func TestCoreMatchesYCSBWorkloadFiles(t *testing.T) {
	type spec struct {
		read, update, insert, scan, rmw float64
		dist                            string
		maxScan                         int
		scanDist                        string
	}
	want := map[string]spec{
		"a": {read: 0.5, update: 0.5, dist: "zipfian", maxScan: 1000, scanDist: "uniform"},
		"b": {read: 0.95, update: 0.05, dist: "zipfian", maxScan: 1000, scanDist: "uniform"},
		"c": {read: 1, dist: "zipfian", maxScan: 1000, scanDist: "uniform"},
		"d": {read: 0.95, insert: 0.05, dist: "latest", maxScan: 1000, scanDist: "uniform"},
		"e": {scan: 0.95, insert: 0.05, dist: "zipfian", maxScan: 100, scanDist: "uniform"},
		"f": {read: 0.5, rmw: 0.5, dist: "zipfian", maxScan: 1000, scanDist: "uniform"},
	}
	for _, name := range CoreNames {
		for _, spelling := range []string{name, strings.ToUpper(name), "workload" + name, "Workload" + strings.ToUpper(name)} {
			w, err := Core(spelling)
			if err != nil {
				t.Fatalf("Core(%q): %v", spelling, err)
			}
			s := want[name]
			if w.ReadProportion != s.read || w.UpdateProportion != s.update || w.InsertProportion != s.insert ||
				w.ScanProportion != s.scan || w.ReadModifyWriteProportion != s.rmw {
				t.Errorf("Core(%q) mix = %s", spelling, w.Mix())
			}
			if w.RequestDistribution != s.dist || w.MaxScanLength != s.maxScan || w.ScanLengthDistribution != s.scanDist {
				t.Errorf("Core(%q): dist %s maxscan %d scandist %s", spelling, w.RequestDistribution,
					w.MaxScanLength, w.ScanLengthDistribution)
			}
			if w.RecordCount != 1000 || w.OperationCount != 1000 || w.FieldCount != 10 || w.FieldLength != 100 ||
				w.ValueBytes() != 1000 || w.ZipfianConstant != 0.99 || w.HotspotDataFraction != 0.2 ||
				w.HotspotOpnFraction != 0.8 || w.OrderedInserts || w.ZeroPadding != 1 {
				t.Errorf("Core(%q) defaults: %+v", spelling, w)
			}
			if err := w.Validate(); err != nil {
				t.Errorf("Core(%q).Validate: %v", spelling, err)
			}
		}
	}
	_, err := Core("g")
	if err == nil || !strings.Contains(err.Error(), "a, b, c, d, e, f") {
		t.Errorf("Core(g) error %v should list the core workloads", err)
	}
}

func TestParseMix(t *testing.T) {
	w, err := ParseMix("read=0.9,update=0.1,dist=uniform,records=1000,fieldcount=1,fieldlength=100")
	if err != nil {
		t.Fatal(err)
	}
	if w.ReadProportion != 0.9 || w.UpdateProportion != 0.1 || w.InsertProportion != 0 || w.ScanProportion != 0 ||
		w.ReadModifyWriteProportion != 0 || w.RequestDistribution != "uniform" || w.RecordCount != 1000 ||
		w.ValueBytes() != 100 {
		t.Errorf("parsed %+v", w)
	}

	w, err = ParseMix(" READ=0.5 , rmw=0.5, dist=Hotspot, hotdata=0.1, hotops=0.9, zipf=4, order=ordered, " +
		"zeropadding=10, maxscan=7, scandist=zipfian, ops=5, name=mine,")
	if err != nil {
		t.Fatal(err)
	}
	if w.Name != "mine" || w.ReadModifyWriteProportion != 0.5 || w.RequestDistribution != "hotspot" ||
		w.HotspotDataFraction != 0.1 || w.HotspotOpnFraction != 0.9 || w.ZipfianConstant != 4 ||
		!w.OrderedInserts || w.ZeroPadding != 10 || w.MaxScanLength != 7 || w.ScanLengthDistribution != "zipfian" ||
		w.OperationCount != 5 {
		t.Errorf("parsed %+v", w)
	}

	// A core workload as the base: its proportions stay unless proportions are given.
	w, err = ParseMix("workload=a,records=100000,dist=hotspot")
	if err != nil {
		t.Fatal(err)
	}
	if w.ReadProportion != 0.5 || w.UpdateProportion != 0.5 || w.RecordCount != 100000 || w.RequestDistribution != "hotspot" {
		t.Errorf("workload=a base: %+v", w)
	}
	w, err = ParseMix("workload=e,scan=1")
	if err != nil {
		t.Fatal(err)
	}
	if w.ScanProportion != 1 || w.InsertProportion != 0 || w.MaxScanLength != 100 {
		t.Errorf("workload=e,scan=1: %+v", w)
	}
}

func TestParseMixErrors(t *testing.T) {
	for _, c := range []struct{ mix, want string }{
		{"", "empty mix"},
		{"read=1,colour=blue", `unknown key "colour"`},
		{"read=1,update", `"update" is not key=value`},
		{"read=0.5,read=0.5", `key "read" given twice`},
		{"read=abc", `key "read": "abc" is not a finite number`},
		{"read=NaN", `key "read"`},
		{"read=1.5", `key "read": 1.5 is not a proportion`},
		{"read=-0.5,update=1.5", `key "read"`},
		{"read=0.9,update=0.2", "sum to"},
		{"read=0.5", "sum to"},
		{"read=1,records=ten", `key "records": "ten" is not an integer`},
		{"read=1,records=0", `RecordCount (mix key "records")`},
		{"read=1,fieldcount=0", `mix key "fieldcount"`},
		{"read=1,fieldlength=-1", `mix key "fieldlength"`},
		{"read=1,fieldcount=1000000,fieldlength=1000", `mix key "fieldcount·fieldlength"`},
		{"read=1,dist=pareto", `mix key "dist"`},
		{"read=1,zipf=1", `mix key "zipf"`},
		{"read=1,zipf=0", `mix key "zipf"`},
		{"read=1,hotdata=2", `mix key "hotdata"`},
		{"read=1,hotops=-1", `mix key "hotops"`},
		{"read=1,dist=hotspot,records=3,hotdata=0.2", `mix key "hotdata"`},
		{"read=1,dist=hotspot,hotdata=1", `mix key "hotdata"`},
		{"scan=1,maxscan=0", `mix key "maxscan"`},
		{"scan=1,scandist=latest", `mix key "scandist"`},
		{"read=1,order=random", `key "order"`},
		{"read=1,zeropadding=99", `mix key "zeropadding"`},
		{"read=1,ops=-1", `mix key "ops"`},
		{"workload=z", `key "workload"`},
		{"read=", `key "read" has an empty value`},
	} {
		_, err := ParseMix(c.mix)
		if err == nil {
			t.Errorf("ParseMix(%q): no error", c.mix)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseMix(%q) = %q, want it to mention %q", c.mix, err, c.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		field string
		edit  func(*Workload)
	}{
		{"RecordCount", func(w *Workload) { w.RecordCount = 0 }},
		{"RecordCount", func(w *Workload) { w.RecordCount = MaxRecordCount + 1 }},
		{"OperationCount", func(w *Workload) { w.OperationCount = -1 }},
		{"FieldCount", func(w *Workload) { w.FieldCount = 0 }},
		{"FieldLength", func(w *Workload) { w.FieldLength = 0 }},
		{"ReadProportion", func(w *Workload) { w.ReadProportion = -0.1 }},
		{"ScanProportion", func(w *Workload) { w.ScanProportion = 2 }},
		{"sum to", func(w *Workload) { w.UpdateProportion = 0.06 }},
		{"RequestDistribution", func(w *Workload) { w.RequestDistribution = "" }},
		{"ZipfianConstant", func(w *Workload) { w.ZipfianConstant = 0 }},
		{"ZipfianConstant", func(w *Workload) { w.ZipfianConstant = 1 }},
		{"HotspotDataFraction", func(w *Workload) { w.HotspotDataFraction = 1.1 }},
		{"HotspotOpnFraction", func(w *Workload) { w.HotspotOpnFraction = -0.1 }},
		{"MaxScanLength", func(w *Workload) { w.MaxScanLength = 0 }},
		{"ScanLengthDistribution", func(w *Workload) { w.ScanLengthDistribution = "" }},
		{"ZeroPadding", func(w *Workload) { w.ZeroPadding = -1 }},
	} {
		w := Defaults()
		c.edit(&w)
		err := w.Validate()
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: Validate() = %v", c.field, err)
		}
	}
	if err := Defaults().Validate(); err != nil {
		t.Errorf("Defaults().Validate() = %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("NewShared of an invalid workload did not panic")
		}
	}()
	NewShared(Workload{})
}

func TestMixRoundTrip(t *testing.T) {
	for _, name := range CoreNames {
		w, _ := Core(name)
		w.ZipfianConstant = 0.7
		w.OrderedInserts = name == "e"
		got, err := ParseMix(w.Mix())
		if err != nil {
			t.Fatalf("ParseMix(%q): %v", w.Mix(), err)
		}
		got.Name = w.Name
		if got != w {
			t.Errorf("round trip of %s:\n got %+v\nwant %+v", name, got, w)
		}
	}
}
