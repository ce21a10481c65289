package quorum_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/replication/replicationtest"
	"meridian/internal/storage"
	"meridian/internal/wire/peerpb"
)

// Split scans (docs/mayflower.md, "Split scans"): n1 coordinates and holds no replica; the
// partition's replicas n2 and n3 are each behind their own 5 MB/s WAN link, so Mayflower
// splits a page between them. Pages are 1 KiB: about 17 records of the data below.
func splitScanOptions(extra map[string]string) map[string]string {
	opts := map[string]string{"read_selector": "mayflower", "network.node_bandwidth": "10MB", "network.wan_bandwidth": "5MB",
		"scan_page_bytes": "1KiB"}
	for k, v := range extra {
		opts[k] = v
	}
	return opts
}

// scanData writes 300 keys at ALL to both replicas — every third overwritten by a second
// version, every seventh then deleted — and returns the live records a scan must return, in
// key order.
func scanData(t *testing.T, h *replicationtest.Harness) []storage.Record {
	t.Helper()
	var live []storage.Record
	for i := range 300 {
		key := []byte(fmt.Sprintf("key%04d", i))
		val := []byte(fmt.Sprintf("value-%d-first", i))
		h.Propose(2, engine.Request{Op: engine.OpPut, Keyspace: "ks", Key: key, Value: val, Level: config.LevelAll})
		if i%3 == 0 {
			val = []byte(fmt.Sprintf("value-%d-second", i))
			h.Propose(3, engine.Request{Op: engine.OpPut, Keyspace: "ks", Key: key, Value: val, Level: config.LevelAll})
		}
		if i%7 == 0 {
			h.Propose(2, engine.Request{Op: engine.OpDelete, Keyspace: "ks", Key: key, Level: config.LevelAll})
		} else {
			live = append(live, storage.Record{Key: key, Value: val})
		}
		h.Stabilize()
	}
	for _, r := range h.TakeReplies() {
		if r.Err != nil {
			t.Fatalf("write: %v", r.Err)
		}
	}
	return live
}

func scanReq(level config.Level, limit int) engine.Request {
	return engine.Request{Op: engine.OpScan, Keyspace: "ks", Limit: limit, Level: level}
}

// sameItems compares a scan's items with want by key and value.
func sameItems(t *testing.T, what string, got, want []storage.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d items, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i].Key, want[i].Key) || !bytes.Equal(got[i].Value, want[i].Value) {
			t.Fatalf("%s: item %d is %q=%q, want %q=%q", what, i, got[i].Key, got[i].Value, want[i].Key, want[i].Value)
		}
	}
}

// scanPages counts the scan replies each node sent, forward and reverse.
func scanPages(envs []*peerpb.Envelope) (forward, reverse map[uint32]int) {
	forward, reverse = map[uint32]int{}, map[uint32]int{}
	for _, e := range envs {
		if r, ok := e.Msg.(*peerpb.Envelope_ScanReply); ok {
			if r.ScanReply.Reverse {
				reverse[e.From]++
			} else {
				forward[e.From]++
			}
		}
	}
	return forward, reverse
}

func runScan(t *testing.T, h *replicationtest.Harness, req engine.Request) (engine.Result, []*peerpb.Envelope) {
	t.Helper()
	id := h.Propose(1, req)
	delivered := deliverAll(h)
	r, ok := h.Reply(id)
	if !ok || r.Err != nil {
		t.Fatalf("scan at %s: ok=%v err=%v", req.Level, ok, r.Err)
	}
	return r, delivered
}

// A scan at ONE of a partition of 300 keys (257 live) in 1 KiB pages is read from both
// replicas, one forward and one backward, and returns exactly what the model and a QUORUM
// scan (never split) return; with mayflower_split never, or the nearest selector, it is not
// split.
func TestSplitScanReadsFromBothEnds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra map[string]string
		split bool
	}{
		{name: "mayflower", split: true},
		{name: "mayflower-never", extra: map[string]string{"mayflower_split": "never"}},
		{name: "nearest", extra: map[string]string{"read_selector": "nearest"}},
		{name: "mayflower-unconfigured", extra: map[string]string{"network.node_bandwidth": "", "network.wan_bandwidth": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := splitScanOptions(tc.extra)
			for k, v := range opts {
				if v == "" {
					delete(opts, k)
				}
			}
			h := notReplica(t, opts)
			live := scanData(t, h)
			st := counters(h, 1)

			one, delivered := runScan(t, h, scanReq(config.LevelOne, 1000))
			sameItems(t, "scan at ONE", one.Items, live)
			if one.More {
				t.Errorf("scan at ONE: More set, every key was returned")
			}
			fwd, rev := scanPages(delivered)
			splits, pf, pb := st.ScanSplits.Load(), st.ScanPagesForward.Load(), st.ScanPagesBackward.Load()
			if tc.split {
				// Two replicas served pages, one of them forward and the other backward.
				if len(fwd) != 1 || len(rev) != 1 {
					t.Fatalf("forward pages by node %v, backward pages by node %v: want one replica each way", fwd, rev)
				}
				for n := range fwd {
					if rev[n] != 0 {
						t.Fatalf("n%d served both halves", n)
					}
				}
				// A page whose round the other half had finished (they met) is not counted: at most
				// a window (scan_window_pages, 2 by default) of each half's pages are in flight
				// when they meet.
				if splits != 1 || pf < 2 || pb < 2 || int64(sum(fwd)) < pf || int64(sum(rev)) < pb || int64(sum(fwd)+sum(rev)) > pf+pb+2*2 {
					t.Errorf("counters: %d split partitions, %d forward and %d backward pages (replies %v %v)", splits, pf, pb, fwd, rev)
				}
				// Without the split the read takes about 22 pages; each half reads about half.
				if total := pf + pb; total > 26 {
					t.Errorf("%d pages in all", total)
				}
				// Where the halves met, at most about a page was read twice.
				if u := st.ScanSplitUnused.Load(); u > 20 {
					t.Errorf("%d records read for nothing", u)
				}
			} else if len(rev) != 0 || len(fwd) != 1 || splits != 0 || pf+pb != 0 {
				t.Errorf("not split: forward pages by node %v, backward %v, counters %d/%d/%d", fwd, rev, splits, pf, pb)
			}

			// QUORUM compares replicas key by key: never split.
			quorum, delivered := runScan(t, h, scanReq(config.LevelQuorum, 1000))
			sameItems(t, "scan at QUORUM", quorum.Items, live)
			if _, rev := scanPages(delivered); len(rev) != 0 || st.ScanSplits.Load() != splits {
				t.Errorf("a QUORUM scan was split: backward pages %v, split partitions %d", rev, st.ScanSplits.Load())
			}
		})
	}
}

func sum(m map[uint32]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// Limits: the split scan returns exactly the first `limit` live keys, with More set when some
// were left out, for limits the forward half fills alone, limits the halves meet before, and
// limits around the number of live keys; the answer matches the unsplit scan's, and the
// backward half reads at most about half the limit for nothing.
func TestSplitScanKeepsTheLimit(t *testing.T) {
	h := notReplica(t, splitScanOptions(nil))
	live := scanData(t, h)
	st := counters(h, 1)
	for _, limit := range []int{1, 17, 40, 100, 200, len(live) - 1, len(live), len(live) + 1, 1000} {
		unused := st.ScanSplitUnused.Load()
		one, _ := runScan(t, h, scanReq(config.LevelOne, limit))
		// What the backward half read for nothing: at most about half the limit (and a page).
		if u := st.ScanSplitUnused.Load() - unused; u > int64(limit/2+18) {
			t.Errorf("limit %d: %d records read for nothing", limit, u)
		}
		want := live[:min(limit, len(live))]
		sameItems(t, fmt.Sprintf("limit %d", limit), one.Items, want)
		switch {
		case limit < len(live) && !one.More:
			t.Errorf("limit %d: More not set, %d keys left out", limit, len(live)-limit)
		case limit > len(live) && one.More:
			t.Errorf("limit %d: More set, every key was returned", limit)
		}
		quorum, _ := runScan(t, h, scanReq(config.LevelQuorum, limit))
		sameItems(t, fmt.Sprintf("limit %d at QUORUM", limit), quorum.Items, want)
	}
	if counters(h, 1).ScanSplits.Load() == 0 {
		t.Fatal("no scan was split")
	}
}

// A scan whose limit the forward half fills alone answers without waiting for the backward
// half: here the backward half's replica never answers at all.
func TestSplitScanLimitDoesNotWaitForTheBackwardHalf(t *testing.T) {
	h := notReplica(t, splitScanOptions(nil))
	live := scanData(t, h)
	id := h.Propose(1, scanReq(config.LevelOne, 60))
	var backward uint32
	for range 1000 {
		if _, ok := h.Reply(id); ok {
			break
		}
		for _, e := range h.Queue {
			if s, ok := e.Msg.(*peerpb.Envelope_Scan); ok && s.Scan.Reverse {
				backward = e.To
			}
		}
		if backward != 0 {
			h.Drop(func(e *peerpb.Envelope) bool { return e.To == backward || e.From == backward })
		}
		if len(h.Deliver(func(*peerpb.Envelope) bool { return true })) == 0 {
			break
		}
	}
	r, ok := h.Reply(id)
	if !ok || r.Err != nil {
		t.Fatalf("scan: ok=%v err=%v", ok, r.Err)
	}
	if backward == 0 {
		t.Fatal("the scan was not split")
	}
	sameItems(t, "limit 60", r.Items, live[:60])
	if !r.More {
		t.Error("More not set")
	}
}

// When one of the two replicas goes silent mid-scan, the answer is still exact. Without a
// limit the other half simply reads on until it reaches where the silent one stopped (work
// stealing). With a limit the backward half stops once both halves hold the limit's count, so
// a silent forward half is given up after the speculative delay, and the backward half's
// replica reads on forward from where the forward half stopped; a silent backward half is not
// waited for (the forward half fills the limit).
func TestSplitScanFinishesWhenAReplicaGoesSilent(t *testing.T) {
	for _, tc := range []struct {
		silent   string
		limit    int
		fallback bool // the silent half is given up (its timer matters)
	}{
		{silent: "forward", limit: 1000},
		{silent: "backward", limit: 1000},
		{silent: "forward", limit: 150, fallback: true},
		{silent: "backward", limit: 150},
	} {
		t.Run(fmt.Sprintf("%s-limit-%d", tc.silent, tc.limit), func(t *testing.T) {
			h := notReplica(t, splitScanOptions(nil))
			live := scanData(t, h)
			st := counters(h, 1)
			id := h.Propose(1, scanReq(config.LevelOne, tc.limit))
			// A few rounds of both halves.
			var node uint32
			for range 100 {
				for _, e := range h.Queue {
					if s, ok := e.Msg.(*peerpb.Envelope_Scan); ok && s.Scan.Reverse == (tc.silent == "backward") {
						node = e.To
					}
				}
				if st.ScanPagesBackward.Load() >= 2 {
					break
				}
				h.Deliver(func(*peerpb.Envelope) bool { return true })
			}
			if node == 0 || st.ScanPagesBackward.Load() < 2 {
				t.Fatalf("the scan was not split (backward pages %d)", st.ScanPagesBackward.Load())
			}
			if _, ok := h.Reply(id); ok {
				t.Fatal("the scan finished before the replica went silent")
			}
			// The replica goes silent: nothing reaches it or comes from it any more.
			for _, other := range h.IDs {
				h.Cut[[2]uint32{node, other}] = true
				h.Cut[[2]uint32{other, node}] = true
			}
			served := 0
			for range 200 {
				if _, ok := h.Reply(id); ok {
					break
				}
				fwd, rev := scanPages(deliverAll(h))
				served += sum(fwd) + sum(rev)
				h.Tick(20 * time.Millisecond)
			}
			r, ok := h.Reply(id)
			if !ok || r.Err != nil {
				t.Fatalf("scan: ok=%v err=%v", ok, r)
			}
			want := live[:min(tc.limit, len(live))]
			sameItems(t, "scan", r.Items, want)
			if r.More != (tc.limit < len(live)) {
				t.Errorf("More = %v with %d of %d keys returned", r.More, len(r.Items), len(live))
			}
			if served == 0 {
				t.Error("the other replica served nothing after the silence")
			}
			if got := st.ScanSplitFallbacks.Load(); tc.fallback && got != 1 {
				t.Errorf("%d halves given up, want 1", got)
			}
		})
	}
}

// A range of less than a page is read by the forward half alone: the backward half starts only
// once a forward page has shown there is more than a page to read.
func TestSplitScanOfOnePageIsNotReadTwice(t *testing.T) {
	h := notReplica(t, splitScanOptions(nil))
	live := scanData(t, h)
	req := scanReq(config.LevelOne, 1000)
	req.Start, req.End = []byte("key0010"), []byte("key0020")
	r, delivered := runScan(t, h, req)
	var want []storage.Record
	for _, rec := range live {
		if bytes.Compare(rec.Key, req.Start) >= 0 && bytes.Compare(rec.Key, req.End) < 0 {
			want = append(want, rec)
		}
	}
	sameItems(t, "scan of [key0010, key0020)", r.Items, want)
	fwd, rev := scanPages(delivered)
	st := counters(h, 1)
	if sum(fwd) != 1 || len(rev) != 0 || st.ScanSplits.Load() != 1 || st.ScanPagesBackward.Load() != 0 {
		t.Errorf("forward pages %v, backward pages %v, split partitions %d", fwd, rev, st.ScanSplits.Load())
	}
}

// The split scans' counters are exported next to the large reads'.
func TestSplitScanMetrics(t *testing.T) {
	h := notReplica(t, splitScanOptions(nil))
	live := scanData(t, h)
	one, _ := runScan(t, h, scanReq(config.LevelOne, 1000))
	sameItems(t, "scan", one.Items, live)
	p, ok := engine.Lookup(config.ProtocolQuorum)
	if !ok || p.Metrics == nil {
		t.Fatal("the quorum protocol registers no metrics")
	}
	reg := prometheus.NewRegistry()
	p.Metrics(reg, h.Engine(1, config.ProtocolQuorum))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			got[name] = m.GetCounter().GetValue()
		}
	}
	st := counters(h, 1)
	for name, want := range map[string]int64{
		"meridian_split_scans_total":                          st.ScanSplits.Load(),
		"meridian_split_scan_pages_total{direction=forward}":  st.ScanPagesForward.Load(),
		"meridian_split_scan_pages_total{direction=backward}": st.ScanPagesBackward.Load(),
		"meridian_split_scan_fallbacks_total":                 0,
		"meridian_split_scan_unused_records_total":            st.ScanSplitUnused.Load(),
	} {
		if v, ok := got[name]; !ok || v != float64(want) {
			t.Errorf("%s = %v (exported %v), want %d", name, v, ok, want)
		}
	}
	if got["meridian_split_scans_total"] != 1 || got["meridian_split_scan_pages_total{direction=backward}"] == 0 {
		t.Errorf("the split scan was not counted: %v", got)
	}
}
