package ycsb

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Request distributions (YCSB's requestdistribution property; YCSB's "sequential" and
// "exponential" are not ported).
const (
	DistUniform = "uniform"
	DistZipfian = "zipfian"
	DistHotspot = "hotspot"
	DistLatest  = "latest"
)

// Limits enforced by Validate.
const (
	MaxRecordCount    = 1 << 40
	MaxOperationCount = 1 << 40
	MaxValueBytes     = 64 << 20
	MaxZeroPadding    = 32
)

// Workload is YCSB's CoreWorkload configuration: the properties of a workload file that this
// package uses. Build one with [Core], [ParseMix] or [Defaults] and adjust fields; Validate
// checks every field (zero values are not silently replaced by defaults).
type Workload struct {
	Name string

	// RecordCount is YCSB's recordcount: the records loaded in the load phase, keys
	// 0..RecordCount-1. Run-phase inserts continue from RecordCount.
	RecordCount int
	// OperationCount is YCSB's operationcount. Only the zipfian distribution uses it: YCSB
	// sizes the scrambled zipfian key space as RecordCount + OperationCount·InsertProportion·2
	// so that keys inserted during the run become readable without reshuffling the popular
	// keys (draws above the acknowledged inserts are redrawn). 0 gives no such headroom.
	OperationCount int

	// FieldCount and FieldLength are YCSB's fieldcount and fieldlength (defaults 10 and 100).
	// Meridian values are opaque, so a record is one value of FieldCount·FieldLength bytes.
	FieldCount, FieldLength int

	// The operation mix; the proportions sum to 1 (YCSB normalises by their sum).
	ReadProportion, UpdateProportion, InsertProportion, ScanProportion, ReadModifyWriteProportion float64

	// RequestDistribution is YCSB's requestdistribution: DistUniform, DistZipfian,
	// DistHotspot or DistLatest.
	RequestDistribution string
	// ZipfianConstant (θ) is used by the zipfian and latest request distributions. YCSB has
	// no property for it and always uses 0.99 (the default); a different value is this port's
	// extension, for GlobLease's exponent-4 skew (Liu's thesis, Table 4.2).
	ZipfianConstant float64
	// HotspotDataFraction and HotspotOpnFraction are YCSB's hotspotdatafraction and
	// hotspotopnfraction (defaults 0.2 and 0.8): that fraction of operations goes to that
	// fraction of the records.
	HotspotDataFraction, HotspotOpnFraction float64

	// MaxScanLength is YCSB's maxscanlength (default 1000); scans are 1..MaxScanLength
	// records long (YCSB's minscanlength is fixed at its default, 1).
	MaxScanLength int
	// ScanLengthDistribution is YCSB's scanlengthdistribution: "uniform" (default) or
	// "zipfian" (favouring short scans, constant 0.99 as in YCSB).
	ScanLengthDistribution string

	// OrderedInserts is YCSB's insertorder=ordered; false is insertorder=hashed (the default),
	// where key numbers are hashed with FNV-64 before they become key names.
	OrderedInserts bool
	// ZeroPadding is YCSB's zeropadding (default 1): key numbers are left-padded with zeros to
	// this many digits. 0 and 1 pad nothing.
	ZeroPadding int
}

// Defaults returns YCSB CoreWorkload's defaults (readproportion 0.95, updateproportion 0.05,
// requestdistribution uniform, fieldcount 10, fieldlength 100, maxscanlength 1000, hotspot
// 0.2/0.8, insertorder hashed, zeropadding 1) with the recordcount and operationcount of
// YCSB's workload files (1000 each).
func Defaults() Workload {
	return Workload{
		Name:                   "default",
		RecordCount:            1000,
		OperationCount:         1000,
		FieldCount:             10,
		FieldLength:            100,
		ReadProportion:         0.95,
		UpdateProportion:       0.05,
		RequestDistribution:    DistUniform,
		ZipfianConstant:        DefaultZipfianConstant,
		HotspotDataFraction:    0.2,
		HotspotOpnFraction:     0.8,
		MaxScanLength:          1000,
		ScanLengthDistribution: DistUniform,
		ZeroPadding:            1,
	}
}

// CoreNames lists the YCSB core workloads [Core] knows.
var CoreNames = []string{"a", "b", "c", "d", "e", "f"}

// Core returns YCSB core workload A–F exactly as YCSB's workloads/workloada..workloadf set it
// (on top of [Defaults]; all six use recordcount=1000, operationcount=1000):
//
//	A update heavy   read 0.5,  update 0.5                 zipfian
//	B read mostly    read 0.95, update 0.05                zipfian
//	C read only      read 1                                zipfian
//	D read latest    read 0.95, insert 0.05                latest
//	E short ranges   scan 0.95, insert 0.05                zipfian, maxscanlength 100, uniform
//	F read-mod-write read 0.5,  readmodifywrite 0.5        zipfian
//
// name is "a".."f" or "workloada".."workloadf", in any case.
func Core(name string) (Workload, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	n = strings.TrimPrefix(n, "workload")
	w := Defaults()
	w.ReadProportion, w.UpdateProportion = 0, 0
	w.RequestDistribution = DistZipfian
	switch n {
	case "a":
		w.ReadProportion, w.UpdateProportion = 0.5, 0.5
	case "b":
		w.ReadProportion, w.UpdateProportion = 0.95, 0.05
	case "c":
		w.ReadProportion = 1
	case "d":
		w.ReadProportion, w.InsertProportion = 0.95, 0.05
		w.RequestDistribution = DistLatest
	case "e":
		w.ScanProportion, w.InsertProportion = 0.95, 0.05
		w.MaxScanLength = 100
		w.ScanLengthDistribution = DistUniform
	case "f":
		w.ReadProportion, w.ReadModifyWriteProportion = 0.5, 0.5
	default:
		return Workload{}, fmt.Errorf("ycsb: unknown core workload %q (want one of %s)",
			name, strings.Join(CoreNames, ", "))
	}
	w.Name = "workload" + n
	return w, nil
}

// ValueBytes is the size of one record's value, FieldCount·FieldLength.
func (w Workload) ValueBytes() int { return w.FieldCount * w.FieldLength }

// Proportion is the proportion of operations of kind k.
func (w Workload) Proportion(k OpKind) float64 {
	switch k {
	case Read:
		return w.ReadProportion
	case Update:
		return w.UpdateProportion
	case Insert:
		return w.InsertProportion
	case Scan:
		return w.ScanProportion
	case ReadModifyWrite:
		return w.ReadModifyWriteProportion
	}
	return 0
}

// expectedNewKeys is CoreWorkload's expectednewkeys = (int)(operationcount · insertproportion ·
// 2.0), the "fudge factor" headroom of the zipfian key space.
func (w Workload) expectedNewKeys() uint64 {
	return uint64(float64(w.OperationCount) * w.InsertProportion * 2.0)
}

// proportionSumTolerance is how far from 1 the proportions may sum.
const proportionSumTolerance = 1e-9

// Validate checks every field and names the first bad one, with its ParseMix key.
func (w Workload) Validate() error {
	bad := func(field, key, format string, args ...any) error {
		return fmt.Errorf("ycsb: workload %q: %s (mix key %q) %s", w.Name, field, key, fmt.Sprintf(format, args...))
	}
	if w.RecordCount < 1 || w.RecordCount > MaxRecordCount {
		return bad("RecordCount", "records", "= %d, want 1..%d", w.RecordCount, MaxRecordCount)
	}
	if w.OperationCount < 0 || w.OperationCount > MaxOperationCount {
		return bad("OperationCount", "ops", "= %d, want 0..%d", w.OperationCount, MaxOperationCount)
	}
	if w.FieldCount < 1 || w.FieldCount > MaxValueBytes {
		return bad("FieldCount", "fieldcount", "= %d, want ≥ 1 (YCSB default 10)", w.FieldCount)
	}
	if w.FieldLength < 1 || w.FieldLength > MaxValueBytes {
		return bad("FieldLength", "fieldlength", "= %d, want ≥ 1 (YCSB default 100)", w.FieldLength)
	}
	if w.FieldCount*w.FieldLength > MaxValueBytes {
		return bad("FieldCount·FieldLength", "fieldcount·fieldlength", "= %d bytes per value, want ≤ %d",
			w.FieldCount*w.FieldLength, MaxValueBytes)
	}
	sum := 0.0
	for _, p := range []struct {
		field, key string
		v          float64
	}{
		{"ReadProportion", "read", w.ReadProportion},
		{"UpdateProportion", "update", w.UpdateProportion},
		{"InsertProportion", "insert", w.InsertProportion},
		{"ScanProportion", "scan", w.ScanProportion},
		{"ReadModifyWriteProportion", "rmw", w.ReadModifyWriteProportion},
	} {
		if !(p.v >= 0 && p.v <= 1) {
			return bad(p.field, p.key, "= %v, want a proportion in [0,1]", p.v)
		}
		sum += p.v
	}
	if math.Abs(sum-1) > proportionSumTolerance {
		return fmt.Errorf("ycsb: workload %q: proportions read %v + update %v + insert %v + scan %v + rmw %v "+
			"sum to %v, want 1", w.Name, w.ReadProportion, w.UpdateProportion, w.InsertProportion,
			w.ScanProportion, w.ReadModifyWriteProportion, sum)
	}
	switch w.RequestDistribution {
	case DistUniform, DistZipfian, DistHotspot, DistLatest:
	default:
		return bad("RequestDistribution", "dist", "= %q, want uniform, zipfian, hotspot or latest",
			w.RequestDistribution)
	}
	if err := checkZipfianConstant(w.ZipfianConstant); err != nil {
		return bad("ZipfianConstant", "zipf", "= %v, want (0,1) ∪ (1,%v] (YCSB default %v)",
			w.ZipfianConstant, MaxZipfianConstant, DefaultZipfianConstant)
	}
	if !(w.HotspotDataFraction >= 0 && w.HotspotDataFraction <= 1) {
		return bad("HotspotDataFraction", "hotdata", "= %v, want [0,1] (YCSB default 0.2)", w.HotspotDataFraction)
	}
	if !(w.HotspotOpnFraction >= 0 && w.HotspotOpnFraction <= 1) {
		return bad("HotspotOpnFraction", "hotops", "= %v, want [0,1] (YCSB default 0.8)", w.HotspotOpnFraction)
	}
	if w.RequestDistribution == DistHotspot {
		hot := int(float64(w.RecordCount) * w.HotspotDataFraction)
		if hot == 0 && w.HotspotOpnFraction > 0 {
			return bad("HotspotDataFraction", "hotdata", "= %v gives an empty hot set of %d records, "+
				"but HotspotOpnFraction %v of operations go to it", w.HotspotDataFraction, w.RecordCount,
				w.HotspotOpnFraction)
		}
		if hot == w.RecordCount && w.HotspotOpnFraction < 1 {
			return bad("HotspotDataFraction", "hotdata", "= %v leaves no cold records of %d, "+
				"but 1-HotspotOpnFraction = %v of operations go to them", w.HotspotDataFraction,
				w.RecordCount, 1-w.HotspotOpnFraction)
		}
	}
	if w.MaxScanLength < 1 || w.MaxScanLength > math.MaxInt32 {
		return bad("MaxScanLength", "maxscan", "= %d, want 1..%d (YCSB default 1000)", w.MaxScanLength, math.MaxInt32)
	}
	switch w.ScanLengthDistribution {
	case DistUniform, DistZipfian:
	default:
		return bad("ScanLengthDistribution", "scandist", "= %q, want uniform or zipfian", w.ScanLengthDistribution)
	}
	if w.ZeroPadding < 0 || w.ZeroPadding > MaxZeroPadding {
		return bad("ZeroPadding", "zeropadding", "= %d, want 0..%d (YCSB default 1)", w.ZeroPadding, MaxZeroPadding)
	}
	return nil
}

// LoadKey is the key of record i of the load phase (YCSB's doInsert: keys 0..RecordCount-1 in
// order, named by buildKeyName). It allocates; see [Generator.Load] for a reusable buffer.
func (w Workload) LoadKey(i int) []byte {
	return AppendKeyName(nil, uint64(i), w.OrderedInserts, w.ZeroPadding)
}

// ---------------------------------------------------------------------------------------------
// Mix strings.

// mixKeys are the keys ParseMix accepts, in the order Mix writes them.
var mixKeys = []string{
	"read", "update", "insert", "scan", "rmw", "dist", "records", "ops", "fieldcount", "fieldlength",
	"zipf", "hotdata", "hotops", "maxscan", "scandist", "order", "zeropadding", "workload", "name",
}

// ParseMix parses a custom workload such as
//
//	read=0.9,update=0.1,dist=uniform,records=1000,fieldcount=1,fieldlength=100
//
// Keys (case-insensitive; items separated by commas):
//
//	read, update, insert, scan, rmw   operation proportions; they must sum to 1 (±1e-9)
//	dist                              uniform | zipfian | hotspot | latest
//	records, ops                      RecordCount, OperationCount
//	fieldcount, fieldlength           value size = fieldcount·fieldlength bytes
//	zipf                              ZipfianConstant
//	hotdata, hotops                   HotspotDataFraction, HotspotOpnFraction
//	maxscan, scandist                 MaxScanLength, ScanLengthDistribution (uniform | zipfian)
//	order                             hashed | ordered (YCSB insertorder)
//	zeropadding                       ZeroPadding
//	workload                          start from core workload a..f instead of the defaults
//	name                              Name (default: the mix string itself)
//
// Unset fields take [Defaults] (or the named core workload's values), except proportions: when
// any proportion is given, the unset ones are 0. Errors name the offending key.
func ParseMix(s string) (Workload, error) {
	vals := make(map[string]string)
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return Workload{}, fmt.Errorf("ycsb: mix %q: item %q is not key=value", s, item)
		}
		k = strings.ToLower(strings.TrimSpace(k))
		v = strings.TrimSpace(v)
		if !isMixKey(k) {
			return Workload{}, fmt.Errorf("ycsb: mix %q: unknown key %q (known keys: %s)", s, k,
				strings.Join(mixKeys, ", "))
		}
		if _, dup := vals[k]; dup {
			return Workload{}, fmt.Errorf("ycsb: mix %q: key %q given twice", s, k)
		}
		if v == "" {
			return Workload{}, fmt.Errorf("ycsb: mix %q: key %q has an empty value", s, k)
		}
		vals[k] = v
	}
	if len(vals) == 0 {
		return Workload{}, errors.New("ycsb: empty mix (want e.g. read=0.95,update=0.05,dist=zipfian)")
	}

	w := Defaults()
	w.ReadProportion, w.UpdateProportion = 0, 0
	if base, ok := vals["workload"]; ok {
		c, err := Core(base)
		if err != nil {
			return Workload{}, fmt.Errorf("ycsb: mix %q: key \"workload\": %v", s, err)
		}
		w = c
	}
	w.Name = strings.TrimSpace(s)
	if name, ok := vals["name"]; ok {
		w.Name = name
	}

	proportions := []struct {
		key string
		dst *float64
	}{
		{"read", &w.ReadProportion},
		{"update", &w.UpdateProportion},
		{"insert", &w.InsertProportion},
		{"scan", &w.ScanProportion},
		{"rmw", &w.ReadModifyWriteProportion},
	}
	anyProportion := false
	for _, p := range proportions {
		if _, ok := vals[p.key]; ok {
			anyProportion = true
		}
	}
	if anyProportion {
		for _, p := range proportions {
			*p.dst = 0
		}
	}

	parseFloat := func(key string, dst *float64) error {
		v, ok := vals[key]
		if !ok {
			return nil
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("ycsb: mix %q: key %q: %q is not a finite number", s, key, v)
		}
		*dst = f
		return nil
	}
	parseInt := func(key string, dst *int) error {
		v, ok := vals[key]
		if !ok {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("ycsb: mix %q: key %q: %q is not an integer", s, key, v)
		}
		*dst = n
		return nil
	}
	for _, p := range proportions {
		if err := parseFloat(p.key, p.dst); err != nil {
			return Workload{}, err
		}
		if *p.dst < 0 || *p.dst > 1 {
			return Workload{}, fmt.Errorf("ycsb: mix %q: key %q: %v is not a proportion in [0,1]", s, p.key, *p.dst)
		}
	}
	for _, f := range []struct {
		key string
		dst *float64
	}{{"zipf", &w.ZipfianConstant}, {"hotdata", &w.HotspotDataFraction}, {"hotops", &w.HotspotOpnFraction}} {
		if err := parseFloat(f.key, f.dst); err != nil {
			return Workload{}, err
		}
	}
	for _, f := range []struct {
		key string
		dst *int
	}{
		{"records", &w.RecordCount}, {"ops", &w.OperationCount}, {"fieldcount", &w.FieldCount},
		{"fieldlength", &w.FieldLength}, {"maxscan", &w.MaxScanLength}, {"zeropadding", &w.ZeroPadding},
	} {
		if err := parseInt(f.key, f.dst); err != nil {
			return Workload{}, err
		}
	}
	if v, ok := vals["dist"]; ok {
		w.RequestDistribution = strings.ToLower(v)
	}
	if v, ok := vals["scandist"]; ok {
		w.ScanLengthDistribution = strings.ToLower(v)
	}
	if v, ok := vals["order"]; ok {
		switch strings.ToLower(v) {
		case "hashed":
			w.OrderedInserts = false
		case "ordered":
			w.OrderedInserts = true
		default:
			return Workload{}, fmt.Errorf("ycsb: mix %q: key \"order\": %q, want hashed or ordered", s, v)
		}
	}

	sum := w.ReadProportion + w.UpdateProportion + w.InsertProportion + w.ScanProportion +
		w.ReadModifyWriteProportion
	if math.Abs(sum-1) > proportionSumTolerance {
		return Workload{}, fmt.Errorf("ycsb: mix %q: proportions read=%v update=%v insert=%v scan=%v rmw=%v "+
			"sum to %v, want 1", s, w.ReadProportion, w.UpdateProportion, w.InsertProportion, w.ScanProportion,
			w.ReadModifyWriteProportion, sum)
	}
	if err := w.Validate(); err != nil {
		return Workload{}, fmt.Errorf("ycsb: mix %q: %w", s, err)
	}
	return w, nil
}

func isMixKey(k string) bool {
	for _, m := range mixKeys {
		if k == m {
			return true
		}
	}
	return false
}

// Mix renders w as a mix string that ParseMix turns back into w (apart from Name), e.g. for a
// results file.
func (w Workload) Mix() string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	order := "hashed"
	if w.OrderedInserts {
		order = "ordered"
	}
	return strings.Join([]string{
		"read=" + f(w.ReadProportion),
		"update=" + f(w.UpdateProportion),
		"insert=" + f(w.InsertProportion),
		"scan=" + f(w.ScanProportion),
		"rmw=" + f(w.ReadModifyWriteProportion),
		"dist=" + w.RequestDistribution,
		"records=" + strconv.Itoa(w.RecordCount),
		"ops=" + strconv.Itoa(w.OperationCount),
		"fieldcount=" + strconv.Itoa(w.FieldCount),
		"fieldlength=" + strconv.Itoa(w.FieldLength),
		"zipf=" + f(w.ZipfianConstant),
		"hotdata=" + f(w.HotspotDataFraction),
		"hotops=" + f(w.HotspotOpnFraction),
		"maxscan=" + strconv.Itoa(w.MaxScanLength),
		"scandist=" + w.ScanLengthDistribution,
		"order=" + order,
		"zeropadding=" + strconv.Itoa(w.ZeroPadding),
	}, ",")
}
