package bench

import (
	"encoding/json"
	"fmt"
	"os"
)

// The JSON schema of every latency benchmark (bench run, bench compare, demo, lab):
//
//	{"topology": NAME, "rtt_ms": X (sweeps only),
//	 "runs": [{"protocol": P, "read_level": L, "write_level": L, "options": {...}, "workload": W,
//	           "regions": {REGION: {"read": {"count","errors","p50_ms","p99_ms","p999_ms","mean_ms",
//	                                         "lower_bound_ms","percentiles":[[pct, ms], ...]},
//	                                "write": {...}, "scan": {...}, "insert": {...}, "rmw": {...}}},
//	           "throughput_ops": X, "timeline": [{"t_s","ops_per_s","p99_ms"}, ...]}]}
//
// "read" and "write" are always present (write = updates); the other operations only when the
// workload issues them.

// OpStats are the latencies of one operation type in one region.
type OpStats struct {
	Count        int64   `json:"count"`
	Errors       int64   `json:"errors"`
	P50Ms        float64 `json:"p50_ms"`
	P99Ms        float64 `json:"p99_ms"`
	P999Ms       float64 `json:"p999_ms"`
	MeanMs       float64 `json:"mean_ms"`
	LowerBoundMs float64 `json:"lower_bound_ms"`
	// Percentiles is the latency distribution as [percentile, ms] pairs, for CDF charts.
	Percentiles [][2]float64 `json:"percentiles,omitempty"`
}

// RegionStats are one region's results of one run.
type RegionStats struct {
	Read   OpStats  `json:"read"`
	Write  OpStats  `json:"write"`
	Scan   *OpStats `json:"scan,omitempty"`
	Insert *OpStats `json:"insert,omitempty"`
	RMW    *OpStats `json:"rmw,omitempty"`
}

// TimePoint is one second of a run.
type TimePoint struct {
	TSec    float64 `json:"t_s"`
	OpsPerS float64 `json:"ops_per_s"`
	P99Ms   float64 `json:"p99_ms"`
	MeanMs  float64 `json:"mean_ms,omitempty"`
}

// Run is one configuration's results.
type Run struct {
	Protocol      string                 `json:"protocol"`
	ReadLevel     string                 `json:"read_level"`
	WriteLevel    string                 `json:"write_level"`
	Options       map[string]string      `json:"options,omitempty"`
	Workload      string                 `json:"workload,omitempty"`
	Regions       map[string]RegionStats `json:"regions"`
	ThroughputOps float64                `json:"throughput_ops"`
	// DroppedArrivals counts open-loop arrivals dropped because every client was busy and
	// the arrival queue was full (the offered load was not offered; RatePerRegion runs only).
	DroppedArrivals int64 `json:"dropped_arrivals,omitempty"`
	// StatusBytesPerNodePerS is the status traffic per node during the run (protocols that
	// count status_bytes_sent).
	StatusBytesPerNodePerS float64     `json:"status_bytes_per_node_per_s,omitempty"`
	Timeline               []TimePoint `json:"timeline,omitempty"`
	// ProtocolCounters are the protocol's own counters over the measured run, summed over
	// every node (engine.Counted: reads by path, lease renewals and updates, master moves, ...).
	ProtocolCounters map[string]int64 `json:"protocol_counters,omitempty"`
}

// Ops is the number of measured operations, every region's.
func (r Run) Ops() int64 {
	var n int64
	for _, s := range r.Regions {
		n += s.Read.Count + s.Write.Count
		if s.RMW != nil {
			n += s.RMW.Count
		}
	}
	return n
}

// Label names the run in tables and chart legends, e.g. "quorum QUORUM/QUORUM" or
// "meteorshower QUORUM/QUORUM theta=upper".
func (r Run) Label() string {
	s := fmt.Sprintf("%s %s/%s", r.Protocol, r.ReadLevel, r.WriteLevel)
	switch {
	case r.ReadLevel == "" && r.WriteLevel == "":
		s = r.Protocol
	case r.WriteLevel == "":
		s = r.Protocol + " " + r.ReadLevel // etcd: its read mode
	}
	for _, k := range sortedKeys(r.Options) {
		if k == "read_level" || k == "write_level" {
			continue
		}
		s += fmt.Sprintf(" %s=%s", k, r.Options[k])
	}
	return s
}

// Report is a benchmark's output.
type Report struct {
	Topology string `json:"topology"`
	// Regions in topology order (JSON maps lose it).
	Regions []string `json:"region_order,omitempty"`
	// RTTMs is set for the points of an RTT sweep (equidistant topology).
	RTTMs *float64 `json:"rtt_ms,omitempty"`
	Runs  []Run    `json:"runs"`
}

// Sweep is an RTT sweep: one report per RTT.
type Sweep struct {
	Points []Report `json:"points"`
}

// WriteJSON writes v as indented JSON.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: encode %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
