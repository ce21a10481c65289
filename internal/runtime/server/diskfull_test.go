package server_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"meridian/api/meridianpb"
	"meridian/internal/runtime/node"
	"meridian/internal/runtime/server"
	"meridian/internal/storage"
)

// countingHandler counts log records at Warn and above.
type countingHandler struct {
	mu    sync.Mutex
	lines []string
}

func (h *countingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.lines = append(h.lines, r.Message)
	h.mu.Unlock()
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
func (h *countingHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.lines)
}

func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				total += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				total += m.GetGauge().GetValue()
			}
		}
	}
	return total
}

// The disk-full scenario of issue 12, defect 2, end to end through the client API of a
// three-region cluster whose first node stores on a 48 MiB filesystem (storage.LimitedFS:
// writes past it fail with ENOSPC, exactly as through Pebble on a full disk). Before the fix
// the node stayed up but every request through it hung, including reads, and it logged a
// line per retried flush. Now: writes stored on the full node are refused at once with a
// clear error; reads keep working; the rest of the cluster keeps accepting writes; the node
// logs the state once, not per operation; once space is added it accepts writes again by
// itself; and no acknowledged write is lost.
func TestDiskFullNodeRefusesWritesServesReadsAndRecovers(t *testing.T) {
	const mib = 1 << 20
	full := storage.NewLimitedFS(48 * mib)
	logs := &countingHandler{}
	reg := prometheus.NewRegistry()
	svcs := startNodes(t, func(i int, o *node.Options) {
		o.Logger, o.DiskReserveBytes = slog.New(slog.DiscardHandler), 16*mib
		if i == 0 {
			o.FS, o.Logger, o.Registry = full, slog.New(logs), reg
		}
	})
	cx := ctx(t)
	value := func() []byte {
		v := make([]byte, 64<<10) // incompressible: Pebble would shrink zeros to nothing
		rand.Read(v)
		return v
	}
	acked := map[string]bool{}
	put := func(svc *server.Service, key string) error {
		_, err := svc.Put(cx, &meridianpb.PutRequest{Keyspace: "kv", Key: []byte(key), Value: value(), Consistency: "QUORUM"})
		if err == nil {
			acked[key] = true
		}
		return err
	}
	// Fill the first node's disk through its own client API.
	var refusal error
	for i := 0; i < 5000 && refusal == nil; i++ {
		err := put(svcs[0], fmt.Sprintf("k%05d", i))
		if err != nil {
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("write %d failed with %v before the disk was reported full", i, err)
			}
			refusal = err
		}
	}
	if refusal == nil {
		t.Fatalf("5000 writes of 64 KiB fitted on a 48 MiB disk (%s)", full)
	}
	msg := status.Convert(refusal).Message()
	for _, want := range []string{"disk full on node a-1", "free ", "reads are still served"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("refusal %q does not say %q", msg, want)
		}
	}
	if full.NoSpaceErrors() != 0 {
		t.Fatalf("the store met ENOSPC %d times: the floor must refuse writes before the disk is exhausted", full.NoSpaceErrors())
	}
	t.Logf("full after %d acknowledged writes: %s", len(acked), msg)
	linesAtFull := logs.count()

	// While full: many more writes through the full node are refused at once, writes
	// through the others succeed (the full node drops their replication), and every read
	// is served, including LOCAL_ONE at the full node.
	const attempts = 200
	for i := range attempts {
		if err := put(svcs[0], fmt.Sprintf("refused%04d", i)); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("write through the full node: %v, want ResourceExhausted", err)
		}
		if err := put(svcs[1+i%2], fmt.Sprintf("elsewhere%04d", i)); err != nil {
			t.Fatalf("write through a healthy node while one is full: %v", err)
		}
	}
	for key := range acked {
		if strings.HasPrefix(key, "elsewhere") {
			continue // written while a-1 was full: a-1 does not hold them yet
		}
		r, err := svcs[0].Get(cx, &meridianpb.GetRequest{Keyspace: "kv", Key: []byte(key), Consistency: "LOCAL_ONE"})
		if err != nil || !r.Found {
			t.Fatalf("LOCAL_ONE read of %s at the full node: found=%v err=%v", key, r.GetFound(), err)
		}
	}
	if got := metricValue(t, reg, "meridian_disk_full_refusals_total", map[string]string{"source": "client"}); got < attempts {
		t.Errorf("client refusals counted: %v, want ≥ %d", got, attempts)
	}
	if got := metricValue(t, reg, "meridian_disk_full_refusals_total", map[string]string{"source": "peer"}); got == 0 {
		t.Errorf("replicated writes refused by the full node were not counted")
	}
	if got := metricValue(t, reg, "meridian_disk_full", nil); got != 1 {
		t.Errorf("meridian_disk_full = %v, want 1", got)
	}
	// Logging is per state change and per minute, not per refused operation (the defect
	// logged 90,692 lines in 3.5 minutes).
	if extra := logs.count() - linesAtFull; extra > 2 {
		t.Errorf("%d log lines while refusing %d writes: %q", extra, 2*attempts, logs.lines[linesAtFull:])
	}

	// Space is added: the node accepts writes again by itself.
	full.SetCapacity(256 * mib)
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := put(svcs[0], "after-recovery")
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
			t.Fatalf("write after space came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := metricValue(t, reg, "meridian_disk_full", nil); got != 0 {
		t.Errorf("meridian_disk_full = %v after recovery, want 0", got)
	}
	// No acknowledged write is lost.
	for key := range acked {
		r, err := svcs[2].Get(cx, &meridianpb.GetRequest{Keyspace: "kv", Key: []byte(key), Consistency: "QUORUM"})
		if err != nil || !r.Found {
			t.Fatalf("acknowledged write %s: found=%v err=%v", key, r.GetFound(), err)
		}
	}
	t.Logf("%d acknowledged writes all readable; %d log lines at warn or above in all", len(acked), logs.count())
}
