// Package topology describes the regions of a cluster and the measured round-trip times (RTT)
// between them. The simulator, the emulated network, the lab's WAN router and the protocols'
// latency bounds all read their delays from a Topology, so that every result can be compared
// with the paper it reproduces (DESIGN.md sections 4 and 7).
//
// A topology file looks like this (see builtin/*.yaml and docs/configuration.md):
//
//	name: gcp-meteorshower-3
//	source: "where the numbers come from"
//	regions: [europe, us, asia]
//	intra_region_rtt_ms: {europe: 0.5, us: 0.5, asia: 0.5}
//	rtt_ms:
//	  europe: {us: 100, asia: 250}
//	  us:     {asia: 150}
//	sweep_rtt_ms: [0, 50, 100]   # optional
//
// RTTs are in milliseconds. Each pair of distinct regions needs an RTT, given in either
// direction (or in both, if they agree). One-way delay is RTT/2.
package topology

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"meridian/internal/topology/strictyaml"
)

// MaxRTTMs bounds every RTT (and sweep point): about 16.7 minutes. It only exists to keep the
// conversion to time.Duration far from overflow; real RTTs are below a second.
const MaxRTTMs = 1_000_000

// maxFileBytes bounds the size of a topology file read by Load.
const maxFileBytes = 1 << 20

var regionName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

const maxNameLen = 63

// Topology is an immutable set of regions with the RTT between every pair.
// Do not modify Regions or SweepRTTMs.
type Topology struct {
	Name    string   // e.g. "gcp-meteorshower-3"
	Source  string   // where the numbers come from (free text)
	Regions []string // in file order

	// SweepRTTMs optionally lists the RTT values (ms) that an RTT sweep over this topology
	// should use (the equidistant topology has one); nil when the file has none.
	SweepRTTMs []float64

	index map[string]int
	rtt   [][]float64 // ms; symmetric; the diagonal holds the intra-region RTT
}

// Spec is the description a Topology is built from; it is also the schema of a topology
// file.
type Spec struct {
	Name    string   `yaml:"name"`
	Source  string   `yaml:"source"`
	Regions []string `yaml:"regions"`
	// IntraRegionRTTMs is the RTT between two nodes of the same region. When nil (absent from
	// the file) every intra-region RTT is 0; when present it must name every region.
	IntraRegionRTTMs map[string]float64 `yaml:"intra_region_rtt_ms"`
	// RTTMs[a][b] is the RTT between regions a and b. Each unordered pair must appear at least
	// once; if both directions are given they must be equal.
	RTTMs      map[string]map[string]float64 `yaml:"rtt_ms"`
	SweepRTTMs []float64                     `yaml:"sweep_rtt_ms"`
}

// Error is an invalid topology description. Path names the field, e.g.
// "rtt_ms.europe.mars".
type Error struct {
	Topology string // the topology's name, when known
	File     string // where it was read from; "" when built from a Spec
	Line     int    // 0 when unknown
	Path     string
	Msg      string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("topology")
	name := e.Topology
	if name == "" && e.File == "" {
		name = "(unnamed)"
	}
	if name != "" {
		b.WriteString(" " + name)
	}
	switch {
	case e.File != "" && e.Line > 0:
		if name != "" {
			fmt.Fprintf(&b, " (%s:%d)", e.File, e.Line)
		} else {
			fmt.Fprintf(&b, " %s:%d", e.File, e.Line)
		}
	case e.File != "":
		if name != "" {
			fmt.Fprintf(&b, " (%s)", e.File)
		} else {
			fmt.Fprintf(&b, " %s", e.File)
		}
	case e.Line > 0:
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Parse reads a topology file's contents. source names the data in error messages (usually
// the file path). Unknown fields, duplicate keys and every inconsistency are errors.
func Parse(data []byte, source string) (*Topology, error) {
	var spec Spec
	lines, err := strictyaml.Unmarshal(data, &spec)
	if err != nil {
		var se *strictyaml.Error
		if errors.As(err, &se) {
			return nil, &Error{File: source, Line: se.Line, Path: se.Path, Msg: se.Msg}
		}
		return nil, err
	}
	t, err := New(spec)
	if err != nil {
		var te *Error
		if errors.As(err, &te) {
			te.File = source
			te.Line = lines.Line(te.Path)
		}
		return nil, err
	}
	return t, nil
}

// Load reads and parses a topology file. The file must be a regular file of at most 1 MiB.
func Load(path string) (*Topology, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("topology: %s: not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("topology: %s: larger than %d bytes", path, maxFileBytes)
	}
	return Parse(data, path)
}

func validRTT(v float64) bool {
	return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 && v <= MaxRTTMs
}

func rttRangeMsg(v float64) string {
	return fmt.Sprintf("RTT must be a finite number of milliseconds between 0 and %d, got %v", MaxRTTMs, v)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// New builds a topology from a Spec and checks it: a valid name; at least one region, each
// named by [a-z0-9][a-z0-9_-]* and listed once; an intra-region RTT for every region (or
// none at all, meaning 0); an RTT for every pair of distinct regions, given in at least one
// direction, equal if given in both; no entry naming an unknown region; every RTT finite and
// within [0, MaxRTTMs]. The first problem found is returned as an *Error.
func New(spec Spec) (*Topology, error) {
	fail := func(path, format string, args ...any) error {
		return &Error{Topology: spec.Name, Path: path, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case spec.Name == "":
		return nil, fail("name", "required")
	case len(spec.Name) > maxNameLen || !regionName.MatchString(spec.Name):
		return nil, fail("name", "%q is not a valid topology name (lower-case letters, digits, '-' and '_', at most %d characters)", spec.Name, maxNameLen)
	}
	if len(spec.Regions) == 0 {
		return nil, fail("regions", "required: list at least one region")
	}
	t := &Topology{
		Name:    spec.Name,
		Source:  spec.Source,
		Regions: append([]string(nil), spec.Regions...),
		index:   make(map[string]int, len(spec.Regions)),
	}
	for i, r := range spec.Regions {
		path := strictyaml.Index("regions", i)
		switch {
		case r == "":
			return nil, fail(path, "empty region name")
		case len(r) > maxNameLen || !regionName.MatchString(r):
			return nil, fail(path, "%q is not a valid region name (lower-case letters, digits, '-' and '_', at most %d characters)", r, maxNameLen)
		}
		if j, dup := t.index[r]; dup {
			return nil, fail(path, "duplicate region %q (also regions[%d])", r, j)
		}
		t.index[r] = i
	}
	unknown := func(path, r string) error {
		return fail(path, "unknown region %q (regions: %s)", r, strings.Join(t.Regions, ", "))
	}

	n := len(t.Regions)
	t.rtt = make([][]float64, n)
	set := make([][]bool, n)
	for i := range t.rtt {
		t.rtt[i] = make([]float64, n)
		set[i] = make([]bool, n)
	}

	// Intra-region RTTs.
	if spec.IntraRegionRTTMs != nil {
		for _, r := range sortedKeys(spec.IntraRegionRTTMs) {
			path := strictyaml.Key("intra_region_rtt_ms", r)
			i, ok := t.index[r]
			if !ok {
				return nil, unknown(path, r)
			}
			v := spec.IntraRegionRTTMs[r]
			if !validRTT(v) {
				return nil, fail(path, "%s", rttRangeMsg(v))
			}
			t.rtt[i][i] = v
		}
		for _, r := range t.Regions {
			if _, ok := spec.IntraRegionRTTMs[r]; !ok {
				return nil, fail(strictyaml.Key("intra_region_rtt_ms", r), "missing: every region needs an intra-region RTT (or omit intra_region_rtt_ms entirely for 0)")
			}
		}
	}

	// Pairwise RTTs.
	for _, a := range sortedKeys(spec.RTTMs) {
		pa := strictyaml.Key("rtt_ms", a)
		i, ok := t.index[a]
		if !ok {
			return nil, unknown(pa, a)
		}
		row := spec.RTTMs[a]
		for _, b := range sortedKeys(row) {
			pb := strictyaml.Key(pa, b)
			j, ok := t.index[b]
			if !ok {
				return nil, unknown(pb, b)
			}
			if i == j {
				return nil, fail(pb, "a region's RTT to itself belongs in intra_region_rtt_ms")
			}
			v := row[b]
			if !validRTT(v) {
				return nil, fail(pb, "%s", rttRangeMsg(v))
			}
			if set[i][j] && t.rtt[i][j] != v {
				return nil, fail(pb, "%v conflicts with rtt_ms.%s.%s = %v (both directions are given and differ)", v, b, a, t.rtt[j][i])
			}
			t.rtt[i][j], t.rtt[j][i] = v, v
			set[i][j], set[j][i] = true, true
		}
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			if !set[i][j] {
				a, b := t.Regions[i], t.Regions[j]
				return nil, fail(strictyaml.Key(strictyaml.Key("rtt_ms", a), b), "missing: no RTT between %s and %s (give rtt_ms.%s.%s or rtt_ms.%s.%s)", a, b, a, b, b, a)
			}
		}
	}

	if spec.SweepRTTMs != nil {
		t.SweepRTTMs = make([]float64, len(spec.SweepRTTMs))
		for i, v := range spec.SweepRTTMs {
			if !validRTT(v) {
				return nil, fail(strictyaml.Index("sweep_rtt_ms", i), "%s", rttRangeMsg(v))
			}
			t.SweepRTTMs[i] = v
		}
	}
	return t, nil
}

// Equidistant returns a topology whose regions are all rttMs apart, with intraRTTMs inside
// each region: the controlled experiment of the MeteorShower paper, for RTT sweeps.
// It panics on invalid arguments (no regions, an invalid or duplicate region name, an RTT out
// of range), which are programming errors.
func Equidistant(name string, regions []string, rttMs, intraRTTMs float64) *Topology {
	spec := Spec{
		Name:             name,
		Source:           fmt.Sprintf("equidistant: %v ms between every pair of regions, %v ms inside a region", rttMs, intraRTTMs),
		Regions:          regions,
		IntraRegionRTTMs: make(map[string]float64, len(regions)),
		RTTMs:            make(map[string]map[string]float64, len(regions)),
	}
	for i, a := range regions {
		spec.IntraRegionRTTMs[a] = intraRTTMs
		row := make(map[string]float64, len(regions))
		for _, b := range regions[i+1:] {
			row[b] = rttMs
		}
		spec.RTTMs[a] = row
	}
	t, err := New(spec)
	if err != nil {
		panic("topology.Equidistant: " + err.Error())
	}
	return t
}

// Spec returns a description from which New rebuilds an equal topology. Pairs are given in
// one direction only (upper triangle, in region order).
func (t *Topology) Spec() Spec {
	s := Spec{
		Name:             t.Name,
		Source:           t.Source,
		Regions:          append([]string(nil), t.Regions...),
		IntraRegionRTTMs: make(map[string]float64, len(t.Regions)),
		RTTMs:            make(map[string]map[string]float64, len(t.Regions)),
	}
	for i, a := range t.Regions {
		s.IntraRegionRTTMs[a] = t.rtt[i][i]
		if i < len(t.Regions)-1 {
			row := make(map[string]float64, len(t.Regions)-i-1)
			for j := i + 1; j < len(t.Regions); j++ {
				row[t.Regions[j]] = t.rtt[i][j]
			}
			s.RTTMs[a] = row
		}
	}
	if t.SweepRTTMs != nil {
		s.SweepRTTMs = append([]float64(nil), t.SweepRTTMs...)
	}
	return s
}

// HasRegion reports whether r is one of the topology's regions.
func (t *Topology) HasRegion(r string) bool {
	_, ok := t.index[r]
	return ok
}

// RTTMs returns the RTT between a and b in milliseconds, as given in the file
// (a == b: the intra-region RTT).
func (t *Topology) RTTMs(a, b string) (float64, error) {
	i, ok := t.index[a]
	if !ok {
		return 0, t.unknownRegion(a)
	}
	j, ok := t.index[b]
	if !ok {
		return 0, t.unknownRegion(b)
	}
	return t.rtt[i][j], nil
}

func (t *Topology) unknownRegion(r string) error {
	return fmt.Errorf("topology %s: unknown region %q (regions: %s)", t.Name, r, strings.Join(t.Regions, ", "))
}

func msToDuration(ms float64) time.Duration {
	return time.Duration(math.Round(ms * float64(time.Millisecond)))
}

// RTTChecked returns the round-trip time between regions a and b (a == b: the intra-region
// RTT), or an error naming an unknown region.
func (t *Topology) RTTChecked(a, b string) (time.Duration, error) {
	ms, err := t.RTTMs(a, b)
	if err != nil {
		return 0, err
	}
	return msToDuration(ms), nil
}

// RTT returns the round-trip time between regions a and b (a == b: the intra-region RTT).
// It panics if a region is unknown: callers validate regions first (config does).
func (t *Topology) RTT(a, b string) time.Duration {
	d, err := t.RTTChecked(a, b)
	if err != nil {
		panic(err)
	}
	return d
}

// OneWay returns the one-way delay from a to b, taken as RTT/2. It panics if a region is
// unknown.
func (t *Topology) OneWay(a, b string) time.Duration { return t.RTT(a, b) / 2 }

// OneWayChecked is OneWay with an error instead of a panic for an unknown region.
func (t *Topology) OneWayChecked(a, b string) (time.Duration, error) {
	d, err := t.RTTChecked(a, b)
	return d / 2, err
}

// String returns the name.
func (t *Topology) String() string { return t.Name }

// NthRTTMs is the count-th smallest RTT in milliseconds from region to the topology's
// regions (0 to itself): the latency of waiting for count replies with one replica per
// region; 0 if there are fewer regions than count.
func (t *Topology) NthRTTMs(region string, count int) float64 {
	rtts := make([]float64, 0, len(t.Regions))
	for _, r := range t.Regions {
		if r == region {
			rtts = append(rtts, 0)
		} else {
			rtts = append(rtts, float64(t.RTT(region, r).Microseconds())/1000)
		}
	}
	slices.Sort(rtts)
	if count < 1 || count > len(rtts) {
		return 0
	}
	return rtts[count-1]
}

// Subset returns the topology restricted to regions (each one of t's, at least one, none
// twice), in the order given, with t's RTTs: the Canopus thesis runs its 3- and 5-datacentre
// experiments on subsets of its 7-datacentre table (4.6.2, Table 4.1). name names the result.
func (t *Topology) Subset(name string, regions []string) (*Topology, error) {
	spec := Spec{Name: name, Source: fmt.Sprintf("%s restricted to %v", t.Name, regions), Regions: regions,
		IntraRegionRTTMs: make(map[string]float64, len(regions)), RTTMs: make(map[string]map[string]float64, len(regions))}
	for i, a := range regions {
		ia, ok := t.index[a]
		if !ok {
			return nil, t.unknownRegion(a)
		}
		spec.IntraRegionRTTMs[a] = t.rtt[ia][ia]
		row := make(map[string]float64, len(regions)-i-1)
		for _, b := range regions[i+1:] {
			ib, ok := t.index[b]
			if !ok {
				return nil, t.unknownRegion(b)
			}
			row[b] = t.rtt[ia][ib]
		}
		spec.RTTMs[a] = row
	}
	return New(spec)
}
