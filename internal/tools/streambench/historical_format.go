package streambench

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Markdown is the historical benchmark's tables.
func (rep *HistoricalReport) Markdown() string {
	var b strings.Builder
	o := rep.Options
	fmt.Fprintf(&b, "## Historical reads at a second node (thesis Fig. 5.12): %d-byte records\n\n", RecordBytes)
	fmt.Fprintf(&b, "%s, %d cores, load average %s at the start and %s at the end; %s. Two `meridian server` processes: the primary %s and the reader %s; object store: %s.",
		rep.Started.Format("2006-01-02 15:04 MST"), rep.Cores, rep.LoadBefore, orQ(rep.LoadAfter), rep.GoVersion, rep.Primary, rep.Reader, rep.ObjectStore)
	fmt.Fprintf(&b, " %d streams at ack %s, appended at %s records/s in batches of %s (open loop) and read at %s records/s (1000 records among the last 50,000, at the primary); phase 1 %v (the first %v left out), phase 2 %v with %d historical clients at the reader, each reading ranges of up to %s records from the lower half of a stream's uploaded records, %v on and %v off; buffer cache %s per node.",
		o.Streams, o.Ack, Count(int64(o.AppendRate)), Count(int64(o.Batch)), Count(int64(o.ReadRate)), o.Phase1, o.Warmup, o.Phase2, o.HistReaders, Count(int64(o.HistRecords)), o.On, o.Off, o.Cache)
	if o.Pin {
		b.WriteString(" Pinned (taskset): the primary and its clients (the benchmark's process) on CPU 0; the reader, the object store and the historical clients (a process of their own) on CPU 1.")
	} else {
		b.WriteString(" Not pinned: every process (the primary, its clients in the benchmark's process, the reader, the object store, the historical clients' process) shares every core.")
	}
	fmt.Fprintf(&b, " %s records uploaded when phase 2 began.\n\n", Count(int64(rep.UploadedAtPhase2)))

	b.WriteString("| phase | appends rec/s | append p50 (ms) | p99 | p99.9 | max | recent reads rec/s | recent p50 (ms) | p99 | historical reads | historical p50 (ms) | p99 | historical rec/s | MB/s | errors (append/recent/historical) |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, p := range rep.Phases {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %s | %s | %s | %.1f | %d/%d/%d |\n", p.Name,
			Count(int64(p.AppendRecPerSec)), Ms(p.Appends.P50Ms), Ms(p.Appends.P99Ms), Ms(p.Appends.P999Ms), Ms(p.Appends.MaxMs),
			Count(int64(p.RecentRecPerSec)), Ms(p.RecentReads.P50Ms), Ms(p.RecentReads.P99Ms),
			p.Historical.Count, Ms(p.Historical.P50Ms), Ms(p.Historical.P99Ms), Count(int64(p.HistoricalRecPerSec)), p.HistoricalMBPerSec,
			p.Appends.Errors, p.RecentReads.Errors, p.Historical.Errors)
	}
	b.WriteString("\nWhat each node did (counters from its /metrics; CPU and I/O from /proc/<pid>/stat and /proc/<pid>/io, whose rchar and wchar count every read and write call, files and sockets alike: the reader's rchar is mostly its GETs from the object store, its wchar its answers):\n\n")
	b.WriteString("| phase | primary: records read (metrics) | recent records received | primary historical reads | reader historical reads | uploads | primary cores | primary wchar MB/s | reader cores | reader rchar MB/s | reader wchar MB/s | object store cores | historical clients cores |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range rep.Phases {
		gw := "—"
		if p.ObjectStore != nil {
			gw = fmt.Sprintf("%.2f", p.ObjectStore.Cores)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.0f | %.0f | %.0f | %.2f | %.1f | %.2f | %.1f | %.1f | %s | %.2f |\n", p.Name,
			Count(int64(p.PrimaryReadRecords)), Count(p.RecentRecords), p.PrimaryHistorical, p.ReaderHistorical, p.Uploads,
			p.Primary.Cores, rate(p.Primary.WriteMB, p.Seconds), p.Reader.Cores, rate(p.Reader.ReadMB, p.Seconds), rate(p.Reader.WriteMB, p.Seconds), gw, p.HistClientCores)
	}
	if len(rep.Phases) > 0 && rep.Phases[0].PrimaryTCP != nil {
		b.WriteString("\nTCP bytes by the other end (MB, 10⁶; tcp_info's bytes_acked and bytes_received of each server's established connections, from `ss -tinp` at the phase's ends; the gRPC connections live through the run, while the object store's HTTP connections come and go, so those are left out — the primary's uploads are its meridian_stream_store_uploaded_bytes_total, the reader's GETs its rchar above):\n\n")
		b.WriteString("| phase | primary → its clients | primary ← its clients | primary → reader and peers | primary ← reader and peers | reader → its clients | reader → primary and peers |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
		for _, p := range rep.Phases {
			pt, rt := p.PrimaryTCP, p.ReaderTCP
			if pt == nil || rt == nil {
				continue
			}
			mb := func(n int64) string { return fmt.Sprintf("%.2f", float64(n)/1e6) }
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", p.Name, mb(pt.ToClients), mb(pt.FromClients), mb(pt.ToPeers), mb(pt.FromPeers),
				mb(rt.ToClients), mb(rt.ToPeers))
		}
	}
	fmt.Fprintf(&b, "\n**Bytes the primary sent for historical reads: %s** (over the whole run, from a scrape before the first request to one after the last: the primary's meridian_stream_read_records_total, %s records, minus the %s records the recent readers received, times %d bytes; the historical reads, %s records, went to the reader alone).\n",
		Count(int64(rep.PrimaryHistoricalBytes)), Count(int64(rep.PrimaryReadRecords)), Count(rep.RecentRecords), RecordBytes, Count(rep.historicalRecords()))
	if e := rep.FirstErrors; e != (FirstErrors{}) {
		fmt.Fprintf(&b, "\nFirst errors: append %q, recent read %q, historical read %q.\n", e.Append, e.Recent, e.Historical)
	}
	if o.HistReaders < 0 {
		b.WriteString("\nControl run: no historical clients (phase 2 is phase 1 again).\n")
	}
	if len(rep.Phases) == 2 {
		p1, p2 := rep.Phases[0], rep.Phases[1]
		fmt.Fprintf(&b, "\nPhase 2 against phase 1 at the primary: append p99 %s → %s ms (%s), p99.9 %s → %s ms; recent-read p99 %s → %s ms (%s).\n",
			Ms(p1.Appends.P99Ms), Ms(p2.Appends.P99Ms), change(p1.Appends.P99Ms, p2.Appends.P99Ms), Ms(p1.Appends.P999Ms), Ms(p2.Appends.P999Ms),
			Ms(p1.RecentReads.P99Ms), Ms(p2.RecentReads.P99Ms), change(p1.RecentReads.P99Ms, p2.RecentReads.P99Ms))
	}
	return b.String()
}

func (rep *HistoricalReport) historicalRecords() int64 {
	var n int64
	for _, p := range rep.Phases {
		n += p.HistoricalRecords
	}
	return n
}

func rate(mb, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return mb / secs
}

// change is b against a, in percent.
func change(a, b float64) string {
	if a <= 0 {
		return "—"
	}
	return fmt.Sprintf("%+.0f%%", 100*(b-a)/a)
}

// Charts draws Fig. 5.12's two panels into dir as stream-historical.png and .svg: (a) the
// timeline of records per second — appends and recent reads at the primary, historical
// reads at the reader —, (b) the latency CDFs of each kind of request, by phase.
func (rep *HistoricalReport) Charts(dir string) ([]string, error) {
	if len(rep.Timeline) == 0 {
		return nil, fmt.Errorf("streambench: no timeline to chart")
	}
	tp := plot.New()
	tp.Title.Text = "(a) Throughput over time"
	tp.X.Label.Text = fmt.Sprintf("seconds (historical reads from %v)", rep.Options.Phase1)
	tp.Y.Label.Text = "million records/s"
	tp.Legend.Top, tp.Legend.Left = true, true
	tp.Add(plotter.NewGrid())
	var maxY float64
	for i, s := range []struct {
		name string
		f    func(TimelinePoint) float64
	}{{"appends (primary)", func(p TimelinePoint) float64 { return p.Appends }},
		{"recent reads (primary)", func(p TimelinePoint) float64 { return p.Recent }},
		{"historical reads (reader)", func(p TimelinePoint) float64 { return p.Historical }}} {
		xys := make(plotter.XYs, len(rep.Timeline))
		for j, p := range rep.Timeline {
			xys[j] = plotter.XY{X: float64(p.Second), Y: s.f(p) / 1e6}
			maxY = max(maxY, xys[j].Y)
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		l.Color, l.Width = []color.Color{seriesColors[0], seriesColors[3], seriesColors[2]}[i], vg.Points(1.5)
		tp.Add(l)
		tp.Legend.Add(s.name, l)
	}
	tp.Y.Min, tp.Y.Max = 0, maxY*1.4

	cp := plot.New()
	cp.Title.Text = "(b) Request completion times"
	cp.X.Label.Text = "ms (log)"
	cp.Y.Label.Text = "CDF"
	cp.X.Scale = plot.LogScale{}
	cp.X.Tick.Marker = plot.LogTicks{Prec: -1}
	cp.Legend.Top, cp.Legend.Left = false, false
	cp.Add(plotter.NewGrid())
	minX, maxX := math.Inf(1), 0.0
	for _, s := range rep.cdfs {
		const points = 400
		var xys plotter.XYs
		step := max(1, len(s.ms)/points)
		for j := 0; j < len(s.ms); j += step {
			xys = append(xys, plotter.XY{X: max(s.ms[j], 0.001), Y: float64(j+1) / float64(len(s.ms))})
		}
		xys = append(xys, plotter.XY{X: max(s.ms[len(s.ms)-1], 0.001), Y: 1})
		for _, xy := range xys {
			minX, maxX = min(minX, xy.X), max(maxX, xy.X)
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		c := seriesColors[0]
		switch {
		case strings.HasPrefix(s.name, "recent"):
			c = seriesColors[3]
		case strings.HasPrefix(s.name, "historical"):
			c = seriesColors[2]
		}
		l.Color, l.Width = c, vg.Points(1.5)
		if strings.Contains(s.name, "phase 2") {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		cp.Add(l)
		cp.Legend.Add(s.name, l)
	}
	if maxX > 0 {
		cp.X.Min, cp.X.Max = minX/1.5, maxX*1.5
	}
	cp.Y.Min, cp.Y.Max = 0, 1.02
	var files []string
	for _, ext := range []string{".png", ".svg"} {
		path := filepath.Join(dir, "stream-historical"+ext)
		if err := saveSideBySide(path, tp, cp); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}
