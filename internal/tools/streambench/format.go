package streambench

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"meridian/internal/tools/streambench/loadgen"
)

// Markdown is the report as a Markdown table with a header that says where and when it ran.
func (rep *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Stream ingest (thesis Fig. 5.10): %d-byte records\n\n", RecordBytes)
	o := rep.Options
	fmt.Fprintf(&b, "%s, %d cores, load average %s at the start and %s at the end; %s; Meridian targets %s with %d appenders (a stream each); runs of %v (%v warm-up), the loaded run at %.0f%% of the peak",
		rep.Started.Format("2006-01-02 15:04 MST"), rep.Cores, rep.LoadBefore, orQ(rep.LoadAfter), rep.GoVersion, strings.Join(o.Targets, " and "), o.Appenders, o.Duration, o.Warmup, 100*o.Fraction)
	if o.Poisson {
		b.WriteString(" (Poisson arrivals)")
	}
	b.WriteString(".")
	if slices.Contains(o.Targets, GRPC) {
		b.WriteString(" meridian (grpc): one `meridian server` process on loopback, the appenders (Go client, one AppendAcked call each) in the benchmark's process, sharing the machine's cores with it; its server CPU is the server process's alone.")
	}
	if rep.KafkaVersion != "" {
		fmt.Fprintf(&b, " %s, 1 node, %d producers.", rep.KafkaVersion, o.KafkaInFlight)
	}
	if rep.InfluxDBVersion != "" {
		fmt.Fprintf(&b, " %s, %d writers.", rep.InfluxDBVersion, o.InfluxWriters)
	}
	b.WriteString("\n\n")
	b.WriteString("| system | ack | batch | peak rec/s | MB/s | rec/s per core | server cores | server CPU µs/rec | client CPU µs/rec | p50 @70% (ms) | p99 @70% (ms) | service p50 @70% (ms) | achieved @70% rec/s | Meridian/Kafka | Meridian/InfluxDB |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rep.Rows {
		if r.Error != "" {
			fmt.Fprintf(&b, "| %s | %s | %s | failed: %s | | | | | | | | | | | |\n", r.Label(), r.Ack, Count(int64(r.Batch)), cell(r.Error))
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1f | %s | %.2f | %.3f | %s | %s | %s | %s | %s | %s | %s |\n",
			r.Label(), r.Ack, Count(int64(r.Batch)), Count(int64(r.Peak.RecordsPerSec+0.5)), r.Peak.MBPerSec,
			Count(int64(r.PerCore+0.5)), r.Peak.ServerCores, r.Peak.ServerCPUPerRecordUs, clientCPU(r.Peak),
			Ms(r.Loaded.P50Ms), Ms(r.Loaded.P99Ms), Ms(r.Loaded.ServiceP50Ms), Count(int64(r.Loaded.RecordsPerSec+0.5)), Ratio(r.VsKafka), Ratio(r.VsInfluxDB))
	}
	var fs []Row
	for _, r := range rep.Rows {
		if r.PeakFsyncs != nil && r.LoadedFsyncs != nil && r.Error == "" {
			fs = append(fs, r)
		}
	}
	if len(fs) > 0 {
		b.WriteString("\nMeridian's fsyncs (the local level's group commits, and at both levels a chunk's fsync when the next one starts, in the append path), warm-up included:\n\n")
		b.WriteString("| target | ack | batch | peak: fsyncs/s | batches per fsync | mean fsync (ms) | max fsync (ms) | loaded: fsyncs/s | mean fsync (ms) | max fsync (ms) |\n")
		b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		secs := rep.Options.Duration.Seconds()
		for _, r := range fs {
			p, l := r.PeakFsyncs, r.LoadedFsyncs
			perFsync := "—"
			if p.Calls > 0 {
				perFsync = fmt.Sprintf("%.1f", float64(r.Peak.TotalRecords)/float64(r.Batch)/float64(p.Calls))
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %.0f | %s | %s | %s | %.0f | %s | %s |\n", r.Target, r.Ack, Count(int64(r.Batch)),
				float64(p.Calls)/secs, perFsync, Ms(meanMs(*p)), Ms(float64(p.Max.Microseconds())/1000),
				float64(l.Calls)/secs, Ms(meanMs(*l)), Ms(float64(l.Max.Microseconds())/1000))
		}
	}
	return b.String()
}

// clientCPU is the load generator's CPU per record when the server is another process.
func clientCPU(r loadgen.Result) string {
	if r.ClientCPUPerRecordUs <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.3f", r.ClientCPUPerRecordUs)
}

// Label is a row's system as the tables show it: "meridian (grpc)" for a Meridian row.
func (r Row) Label() string {
	if r.Target != "" {
		return fmt.Sprintf("%s (%s)", r.System, r.Target)
	}
	return r.System
}

func meanMs(f FsyncStats) float64 {
	if f.Calls == 0 {
		return 0
	}
	return float64(f.Total.Microseconds()) / 1000 / float64(f.Calls)
}

func orQ(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

// cell makes s safe in a table cell: one line, no pipes, at most 120 characters.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.ReplaceAll(s, "|", "/")
	if r := []rune(s); len(r) > 120 {
		s = string(r[:117]) + "..."
	}
	return s
}

// Count is n with thousands separators: 1234567 → "1,234,567".
func Count(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Ms is a latency in milliseconds with three significant digits or so.
func Ms(ms float64) string {
	switch {
	case ms <= 0:
		return "—"
	case ms < 1:
		return fmt.Sprintf("%.3f", ms)
	case ms < 10:
		return fmt.Sprintf("%.2f", ms)
	case ms < 100:
		return fmt.Sprintf("%.1f", ms)
	}
	return fmt.Sprintf("%.0f", ms)
}

// Ratio is "2.35×", or "—" for none.
func Ratio(v float64) string {
	if v <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", v)
}

// WriteJSON writes v as indented JSON to path.
func WriteJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
