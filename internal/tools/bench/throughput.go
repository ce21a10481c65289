// Package bench holds Meridian's benchmark drivers. Throughput measures a running node over
// gRPC with a fixed number of concurrent requests (closed loop), and reports operations per
// second, latency percentiles and CPU per operation (DESIGN.md section 7: throughput per node
// and per core on these 2-core machines).
package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"meridian/client"
)

// ThroughputOptions configures a throughput run.
type ThroughputOptions struct {
	Endpoint    string
	Keyspace    string
	Op          string // put or get
	Concurrency int
	ValueBytes  int
	Keys        int
	Duration    time.Duration
	Consistency string
	// ServerPID, when set, is sampled from /proc for the server's CPU time.
	ServerPID int
	Out       io.Writer
}

// ThroughputResult is the outcome.
type ThroughputResult struct {
	Op               string  `json:"op"`
	Ops              int64   `json:"ops"`
	Errors           int64   `json:"errors"`
	Seconds          float64 `json:"seconds"`
	OpsPerSec        float64 `json:"ops_per_sec"`
	P50Ms            float64 `json:"p50_ms"`
	P99Ms            float64 `json:"p99_ms"`
	ServerCPUSeconds float64 `json:"server_cpu_seconds"`
	ClientCPUSeconds float64 `json:"client_cpu_seconds"`
	ServerCPUPerOpUs float64 `json:"server_cpu_per_op_us"`
	ClientCPUPerOpUs float64 `json:"client_cpu_per_op_us"`
	FirstError       string  `json:"first_error,omitempty"`
}

// Throughput runs the benchmark. Gets read keys that a preceding put run wrote (or nothing:
// a miss costs the same path); run put first for a realistic read.
func Throughput(ctx context.Context, o ThroughputOptions) (*ThroughputResult, error) {
	if o.Concurrency <= 0 || o.Concurrency > 10_000 {
		return nil, fmt.Errorf("bench: concurrency %d out of range 1..10000", o.Concurrency)
	}
	if o.Duration <= 0 || o.Duration > time.Hour {
		return nil, fmt.Errorf("bench: duration %v out of range (0, 1h]", o.Duration)
	}
	if o.Keys <= 0 {
		return nil, fmt.Errorf("bench: keys must be positive")
	}
	if o.Op != "put" && o.Op != "get" {
		return nil, fmt.Errorf("bench: op %q: want put or get", o.Op)
	}
	// A few connections so one HTTP/2 connection's flow control does not cap the rate.
	const conns = 4
	var cs []*client.Client
	for range conns {
		c, err := client.Dial(o.Endpoint)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		cs = append(cs, c)
	}
	value := make([]byte, o.ValueBytes)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	hist := hdrhistogram.New(1, 60_000_000, 3)
	var mu sync.Mutex
	var ops, errCount atomic.Int64
	var firstErr atomic.Value
	runEnd := time.Now().Add(o.Duration)
	runCtx, cancel := context.WithDeadline(ctx, runEnd)
	defer cancel()
	serverCPU0, _ := procCPU(o.ServerPID)
	clientCPU0 := SelfCPUSeconds()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range o.Concurrency {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c := cs[w%conns]
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			local := hdrhistogram.New(1, 60_000_000, 3)
			key := make([]byte, 0, 16)
			for runCtx.Err() == nil {
				key = fmt.Appendf(key[:0], "k%09d", rng.IntN(o.Keys))
				t0 := time.Now()
				var err error
				if o.Op == "put" {
					_, err = c.Put(runCtx, o.Keyspace, key, value, client.Consistency(o.Consistency))
				} else {
					_, err = c.Get(runCtx, o.Keyspace, key, client.Consistency(o.Consistency))
				}
				if err != nil && (runCtx.Err() != nil || time.Until(runEnd) < 50*time.Millisecond) {
					// The run ended while this request was in flight (gRPC may report the
					// deadline a moment before the context does): not an error.
					break
				}
				if err != nil {
					errCount.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				ops.Add(1)
				_ = local.RecordValue(max(1, time.Since(t0).Microseconds()))
			}
			mu.Lock()
			hist.Merge(local)
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	serverCPU1, serr := procCPU(o.ServerPID)
	clientCPU1 := SelfCPUSeconds()
	r := &ThroughputResult{
		Op: o.Op, Ops: ops.Load(), Errors: errCount.Load(), Seconds: elapsed,
		OpsPerSec: float64(ops.Load()) / elapsed,
		P50Ms:     float64(hist.ValueAtQuantile(50)) / 1000,
		P99Ms:     float64(hist.ValueAtQuantile(99)) / 1000,
	}
	if v := firstErr.Load(); v != nil {
		r.FirstError = v.(string)
	}
	r.ClientCPUSeconds = clientCPU1 - clientCPU0
	if o.ServerPID > 0 && serr == nil {
		r.ServerCPUSeconds = serverCPU1 - serverCPU0
	}
	if r.Ops > 0 {
		r.ServerCPUPerOpUs = r.ServerCPUSeconds / float64(r.Ops) * 1e6
		r.ClientCPUPerOpUs = r.ClientCPUSeconds / float64(r.Ops) * 1e6
	}
	return r, nil
}

// procCPU returns user+system CPU seconds of pid from /proc/PID/stat.
func procCPU(pid int) (float64, error) {
	if pid <= 0 {
		return 0, nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: read CPU of pid %d: %w", pid, err)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("bench: malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// Fields after the command: state(0) ... utime is field 14 overall, i.e. index 11 here.
	if len(f) < 13 {
		return 0, fmt.Errorf("bench: short /proc/%d/stat", pid)
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100, nil // USER_HZ is 100 on Linux
}

// SelfCPUSeconds is the CPU time (user and system) this process has used.
func SelfCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// Print writes r as one line.
func (r *ThroughputResult) Print(w io.Writer) {
	fmt.Fprintf(w, "%s: %d ops in %.1fs = %.0f ops/s, p50 %.2f ms, p99 %.2f ms, errors %d",
		r.Op, r.Ops, r.Seconds, r.OpsPerSec, r.P50Ms, r.P99Ms, r.Errors)
	if r.ServerCPUSeconds > 0 {
		fmt.Fprintf(w, ", server CPU %.1f µs/op (%.2f cores)", r.ServerCPUPerOpUs, r.ServerCPUSeconds/r.Seconds)
	}
	fmt.Fprintf(w, ", client CPU %.1f µs/op", r.ClientCPUPerOpUs)
	if r.FirstError != "" {
		fmt.Fprintf(w, " (first error: %s)", r.FirstError)
	}
	fmt.Fprintln(w)
}
