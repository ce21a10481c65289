package quorum_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"meridian/internal/config"
	"meridian/internal/wire/peerpb"
)

// Streaming scan pages (docs/mayflower.md, "Streaming scan pages"): a round that asks one
// replica alone asks for a window of pages, which the replica streams on credit.

// scanMessages counts the scan requests, pages and credits among envs.
func scanMessages(envs []*peerpb.Envelope) (requests, pages, credits int) {
	for _, e := range envs {
		switch e.Msg.(type) {
		case *peerpb.Envelope_Scan:
			requests++
		case *peerpb.Envelope_ScanReply:
			pages++
		case *peerpb.Envelope_ScanCredit:
			credits++
		}
	}
	return requests, pages, credits
}

// A scan at ONE from a remote replica, read alone (nearest) or split (mayflower), returns the
// same items for every window and limit; with a window of more than a page the replica sends
// several pages per request (a window of 1 is a request per page).
func TestStreamingScanIsExact(t *testing.T) {
	for _, selector := range []string{"nearest", "mayflower"} {
		for _, window := range []int{1, 2, 8} {
			t.Run(fmt.Sprintf("%s-window-%d", selector, window), func(t *testing.T) {
				h := notReplica(t, splitScanOptions(map[string]string{"read_selector": selector, "scan_window_pages": fmt.Sprint(window)}))
				live := scanData(t, h)
				for _, limit := range []int{1, 17, 100, len(live), 1000} {
					r, delivered := runScan(t, h, scanReq(config.LevelOne, limit))
					want := live[:min(limit, len(live))]
					sameItems(t, fmt.Sprintf("limit %d", limit), r.Items, want)
					if r.More != (limit < len(live)) {
						t.Errorf("limit %d: More = %v", limit, r.More)
					}
					requests, pages, credits := scanMessages(delivered)
					switch {
					case window == 1 && (requests != pages || credits != 0):
						t.Errorf("limit %d, window 1: %d requests, %d pages, %d credits: want a request per page and no credit", limit, requests, pages, credits)
					case window == 8 && limit >= 100 && requests*4 > pages:
						// About 22 pages (12 per half when split) in one request per half.
						t.Errorf("limit %d, window 8: %d requests for %d pages", limit, requests, pages)
					}
				}
				if selector == "mayflower" && counters(h, 1).ScanSplits.Load() == 0 {
					t.Error("no scan was split")
				}
				var streams int64
				for _, n := range []uint32{2, 3} {
					streams += counters(h, n).ScanStreams.Load()
				}
				if (window > 1) != (streams > 0) {
					t.Errorf("window %d: the replicas served %d streams", window, streams)
				}
			})
		}
	}
}

// Pages and credits that arrive out of order, twice, or not at all, and replicas that fall
// silent for a while, never change a scan's answer: a page is taken only in order and only if
// it continues the read, and a stalled stream is given up and read on from where it stands.
func TestStreamingScanSurvivesReorderingLossAndDuplicates(t *testing.T) {
	for seed := range uint64(30) {
		for _, selector := range []string{"nearest", "mayflower"} {
			t.Run(fmt.Sprintf("%s-seed-%d", selector, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 7))
				h := notReplica(t, splitScanOptions(map[string]string{"read_selector": selector, "scan_window_pages": "4", "speculative_retry": "20ms"}))
				live := scanData(t, h)
				limit := []int{40, 150, 1000}[rng.IntN(3)]
				id := h.Propose(1, scanReq(config.LevelOne, limit))
				for step := 0; step < 5000; step++ {
					if _, ok := h.Reply(id); ok {
						break
					}
					// Duplicate a few scan messages, drop a few, deliver a random half.
					var extra []*peerpb.Envelope
					for _, e := range h.Queue {
						switch e.Msg.(type) {
						case *peerpb.Envelope_Scan, *peerpb.Envelope_ScanReply, *peerpb.Envelope_ScanCredit:
							if rng.IntN(20) == 0 {
								extra = append(extra, proto.Clone(e).(*peerpb.Envelope))
							}
						}
					}
					h.Queue = append(h.Queue, extra...)
					h.Drop(func(e *peerpb.Envelope) bool {
						switch e.Msg.(type) {
						case *peerpb.Envelope_ScanReply, *peerpb.Envelope_ScanCredit:
							return rng.IntN(25) == 0
						}
						return false
					})
					h.Deliver(func(*peerpb.Envelope) bool { return rng.IntN(2) == 0 })
					if step%5 == 4 {
						h.Tick(10 * time.Millisecond)
					}
				}
				r, ok := h.Reply(id)
				if !ok || r.Err != nil {
					t.Fatalf("scan: ok=%v err=%v", ok, r.Err)
				}
				want := live[:min(limit, len(live))]
				sameItems(t, fmt.Sprintf("limit %d", limit), r.Items, want)
				if r.More != (limit < len(live)) {
					t.Errorf("More = %v", r.More)
				}
			})
		}
	}
}

// A replica serves at most maxScanCursors (1024) streams at once: the requests beyond them get
// one page each, not a stream, and those scans go on page by page; every scan is exact. A
// stream whose coordinator falls silent is dropped after scanCursorIdle (10 s).
func TestScanCursorsAreBoundedAndExpire(t *testing.T) {
	h := notReplica(t, splitScanOptions(map[string]string{"read_selector": "nearest", "scan_window_pages": "2"}))
	live := scanData(t, h)
	const scans = 1030
	var ids []uint64
	for range scans {
		ids = append(ids, h.Propose(1, scanReq(config.LevelOne, 1000)))
	}
	// The requests reach the replica; its pages wait.
	h.Deliver(func(e *peerpb.Envelope) bool { _, ok := e.Msg.(*peerpb.Envelope_Scan); return ok })
	replica := uint32(0)
	for _, n := range []uint32{2, 3} {
		if counters(h, n).ScanStreams.Load() > 0 {
			replica = n
		}
	}
	if replica == 0 {
		t.Fatal("no replica served a stream")
	}
	st := counters(h, replica)
	if got, refused := st.ScanStreams.Load(), st.ScanCursorsRefused.Load(); got != 1024 || refused != scans-1024 {
		t.Fatalf("%d streams and %d refused, want 1024 and %d", got, refused, scans-1024)
	}
	deliverAll(h)
	for _, id := range ids {
		r, ok := h.Reply(id)
		if !ok || r.Err != nil {
			t.Fatalf("scan %d: ok=%v err=%v", id, ok, r.Err)
		}
		sameItems(t, "scan", r.Items, live)
	}

	// A coordinator that falls silent: its stream's cursor is dropped after 10 s.
	h.Propose(1, scanReq(config.LevelOne, 1000))
	h.Deliver(func(e *peerpb.Envelope) bool { _, ok := e.Msg.(*peerpb.Envelope_Scan); return ok })
	for _, other := range h.IDs {
		h.Cut[[2]uint32{1, other}] = true
		h.Cut[[2]uint32{other, 1}] = true
	}
	before := st.ScanCursorsExpired.Load()
	deliverAll(h)
	h.Tick(5 * time.Second)
	if st.ScanCursorsExpired.Load() != before {
		t.Fatal("a cursor expired within 5 s")
	}
	h.Tick(6 * time.Second)
	if got := st.ScanCursorsExpired.Load() - before; got != 1 {
		t.Fatalf("%d cursors expired after 11 s of silence, want 1", got)
	}
}

// Pages that arrive out of order or twice are put back in order: without loss no stream is
// given up.
func TestStreamingScanReordersPages(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 11))
		h := notReplica(t, splitScanOptions(map[string]string{"read_selector": "nearest", "scan_window_pages": "6"}))
		live := scanData(t, h)
		id := h.Propose(1, scanReq(config.LevelOne, 1000))
		for step := 0; step < 5000; step++ {
			if _, ok := h.Reply(id); ok {
				break
			}
			var extra []*peerpb.Envelope
			for _, e := range h.Queue {
				if _, ok := e.Msg.(*peerpb.Envelope_ScanReply); ok && rng.IntN(10) == 0 {
					extra = append(extra, proto.Clone(e).(*peerpb.Envelope))
				}
			}
			// Reverse the queue now and then: later pages overtake earlier ones.
			h.Queue = append(h.Queue, extra...)
			if rng.IntN(2) == 0 {
				for i, j := 0, len(h.Queue)-1; i < j; i, j = i+1, j-1 {
					h.Queue[i], h.Queue[j] = h.Queue[j], h.Queue[i]
				}
			}
			h.Deliver(func(*peerpb.Envelope) bool { return rng.IntN(3) > 0 })
		}
		r, ok := h.Reply(id)
		if !ok || r.Err != nil {
			t.Fatalf("seed %d: scan: ok=%v err=%v", seed, ok, r.Err)
		}
		sameItems(t, fmt.Sprintf("seed %d", seed), r.Items, live)
		if n := counters(h, 1).ScanStreamRestarts.Load(); n != 0 {
			t.Fatalf("seed %d: %d streams given up without a page lost", seed, n)
		}
	}
}

// A page that does not continue the read where it stands — as a cursor restarted by a repeated
// request would send once the data changed under it — is refused: the stream is given up and
// the partition read on from where it stood, so no key is skipped.
func TestStreamingScanRefusesAPageThatSkipsKeys(t *testing.T) {
	h := notReplica(t, splitScanOptions(map[string]string{"read_selector": "nearest", "scan_window_pages": "2"}))
	live := scanData(t, h)
	id := h.Propose(1, scanReq(config.LevelOne, 1000))
	forged := false
	for step := 0; step < 1000; step++ {
		if _, ok := h.Reply(id); ok {
			break
		}
		if !forged {
			for _, e := range h.Queue {
				// Page 1 loses its first three records and says it was read from the fourth.
				if r, ok := e.Msg.(*peerpb.Envelope_ScanReply); ok && r.ScanReply.Seq == 1 && len(r.ScanReply.Records) > 4 {
					r.ScanReply.Records = r.ScanReply.Records[3:]
					r.ScanReply.From = r.ScanReply.Records[0].Key
					forged = true
				}
			}
		}
		h.Deliver(func(*peerpb.Envelope) bool { return true })
	}
	if !forged {
		t.Fatal("no second page to forge")
	}
	r, ok := h.Reply(id)
	if !ok || r.Err != nil {
		t.Fatalf("scan: ok=%v err=%v", ok, r.Err)
	}
	sameItems(t, "scan", r.Items, live)
	if n := counters(h, 1).ScanStreamRestarts.Load(); n != 1 {
		t.Errorf("%d streams given up, want 1", n)
	}
}

// A stream is a transfer its coordinator reports (transfers.go), so the Mayflower model of
// every node sees it: while a split scan's two halves stream, n1's report lists a transfer
// from each half's replica with what is left of it; once the scan is over, none.
func TestStreamingScansAreReportedTransfers(t *testing.T) {
	h := notReplica(t, splitScanOptions(map[string]string{"scan_window_pages": "2", "speculative_retry": "1s"}))
	scanData(t, h)
	id := h.Propose(1, scanReq(config.LevelOne, 1000))
	// Deliver until both halves have brought a page; hold the rest.
	for range 100 {
		if counters(h, 1).ScanPagesBackward.Load() > 0 {
			break
		}
		h.Deliver(func(*peerpb.Envelope) bool { return true })
	}
	if counters(h, 1).ScanPagesBackward.Load() == 0 {
		t.Fatal("the scan was not split")
	}
	held := h.Drop(func(*peerpb.Envelope) bool { return true })
	reports := func() map[uint32]*peerpb.Transfer {
		h.Tick(time.Second)
		out := map[uint32]*peerpb.Transfer{}
		for _, e := range h.Drop(func(e *peerpb.Envelope) bool {
			_, ok := e.Msg.(*peerpb.Envelope_TransferReport)
			return ok && e.From == 1
		}) {
			for _, tr := range e.Msg.(*peerpb.Envelope_TransferReport).TransferReport.Transfers {
				out[tr.Source] = tr
			}
		}
		return out
	}
	got := reports()
	for _, n := range []uint32{2, 3} {
		tr, ok := got[n]
		if !ok || !tr.RemainingKnown || tr.RemainingBytes == 0 {
			t.Fatalf("n1 reports %v: want a transfer with bytes left from n%d", got, n)
		}
	}
	h.Queue = append(h.Queue, held...)
	deliverAll(h)
	if r, ok := h.Reply(id); !ok || r.Err != nil {
		t.Fatalf("scan: ok=%v err=%v", ok, r.Err)
	}
	if got := reports(); len(got) != 0 {
		t.Fatalf("after the scan n1 still reports %v", got)
	}
}
