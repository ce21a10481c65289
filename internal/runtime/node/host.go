package node

import (
	"bufio"
	"fmt"
	"math"
	"os"
	rtmetrics "runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// hostSignals measures what Hubbub-scale's detector cross-checks a slow node with
// (internal/hubbub): the CPU time the hypervisor stole from this host and the Go scheduler's
// latency (how long runnable goroutines waited for a thread: run-queue wait as the runtime
// sees it). Each reading covers the time since the previous one.
type hostSignals struct {
	lastSteal, lastTotal uint64
	lastSched            *rtmetrics.Float64Histogram
	sample               []rtmetrics.Sample
}

const schedLatencies = "/sched/latencies:seconds"

func newHostSignals() *hostSignals {
	return &hostSignals{sample: []rtmetrics.Sample{{Name: schedLatencies}}}
}

// read returns the steal share and the scheduler's p99 latency since the last call (zeros on
// the first call, or where a source is missing: /proc/stat outside Linux).
func (h *hostSignals) read() (steal float64, schedP99 time.Duration) {
	if s, t, err := readProcStatCPU("/proc/stat"); err == nil {
		if h.lastTotal > 0 && t > h.lastTotal {
			steal = float64(s-h.lastSteal) / float64(t-h.lastTotal)
		}
		h.lastSteal, h.lastTotal = s, t
	}
	rtmetrics.Read(h.sample)
	if h.sample[0].Value.Kind() == rtmetrics.KindFloat64Histogram {
		cur := h.sample[0].Value.Float64Histogram()
		if h.lastSched != nil && len(h.lastSched.Counts) == len(cur.Counts) {
			schedP99 = histDeltaQuantile(h.lastSched, cur, 0.99)
		}
		h.lastSched = &rtmetrics.Float64Histogram{Counts: append([]uint64(nil), cur.Counts...), Buckets: cur.Buckets}
	}
	return steal, schedP99
}

// histDeltaQuantile is quantile q of the observations cur holds beyond prev (same buckets),
// at the upper bound of its bucket.
func histDeltaQuantile(prev, cur *rtmetrics.Float64Histogram, q float64) time.Duration {
	var total uint64
	for i := range cur.Counts {
		total += cur.Counts[i] - prev.Counts[i]
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i := range cur.Counts {
		seen += cur.Counts[i] - prev.Counts[i]
		if seen >= want {
			upper := cur.Buckets[i+1]
			if math.IsInf(upper, 1) {
				upper = cur.Buckets[i]
			}
			return time.Duration(upper * float64(time.Second))
		}
	}
	return 0
}

// readProcStatCPU returns the aggregate steal and total jiffies of /proc/stat's "cpu" line.
func readProcStatCPU(path string) (steal, total uint64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 9 || fields[0] != "cpu" {
			continue
		}
		// user nice system idle iowait irq softirq steal [guest guest_nice]; guest time
		// is already counted in user.
		for i, f := range fields[1:9] {
			v, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("%s: cpu field %d: %w", path, i+1, err)
			}
			total += v
			if i == 7 {
				steal = v
			}
		}
		return steal, total, nil
	}
	return 0, 0, fmt.Errorf("%s: no aggregate cpu line", path)
}

// serviceMeter sums the time the client requests the node coordinated took.
type serviceMeter struct {
	count, micros         atomic.Int64
	lastCount, lastMicros int64
}

func (s *serviceMeter) observe(d time.Duration) {
	s.count.Add(1)
	s.micros.Add(max(d.Microseconds(), 1))
}

// mean returns the mean since the last call (0: no request).
func (s *serviceMeter) mean() float64 {
	c, m := s.count.Load(), s.micros.Load()
	dc, dm := c-s.lastCount, m-s.lastMicros
	s.lastCount, s.lastMicros = c, m
	if dc <= 0 {
		return 0
	}
	return float64(dm) / float64(dc)
}
