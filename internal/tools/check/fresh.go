package check

import (
	"fmt"
	"slices"

	"meridian/internal/hlc"
)

// FreshReads checks the promise of reads at a level R with writes at a level W where
// R + W > N (README, "Consistency levels": QUORUM/QUORUM and ALL/ONE return the newest
// acknowledged write), key by key and in real time:
//   - an OK read returns the newest acknowledged write of its key — the highest version among
//     the OK writes that returned before the read was invoked — or a newer version; absent
//     only when no write of the key was acknowledged before it;
//   - the value it returns was written to its key by a write that did not fail and was
//     invoked before the read returned, with the version that write carries (when known).
//
// It is weaker than sequential consistency: it orders nothing across keys nor along a
// process, and a read may return a write still in progress, which a later read may not
// return again (a write at ALL that timed out may have reached one replica only). That is
// all a read at ONE or LOCAL_ONE promises, even with writes at ALL: it repairs nothing, so
// two reads of one process at two replicas may see a partly applied write and then not see
// it, which sequential consistency forbids. It returns the first violating read in invocation
// order, nil when every read is fresh.
func FreshReads(h History) *Violation {
	byValue := make(map[string]int32)
	acked := make(map[string][]int32) // key → its OK writes, by return time
	for i := range h {
		op := &h[i]
		if op.Kind != Write {
			continue
		}
		byValue[op.Value] = int32(i)
		if op.Outcome == OK {
			acked[op.Key] = append(acked[op.Key], int32(i))
		}
	}
	// Per key, the OK writes by return time and, for each prefix, its newest write.
	newestOf := make(map[string][]int32, len(acked))
	for k, ws := range acked {
		slices.SortFunc(ws, func(a, b int32) int { return cmpInt(h[a].Return, h[b].Return) })
		best := make([]int32, len(ws))
		for j, w := range ws {
			best[j] = w
			if j > 0 && !h[best[j-1]].Version.Less(h[w].Version) {
				best[j] = best[j-1]
			}
		}
		newestOf[k] = best
	}
	for _, i := range invocationOrder(h) {
		r := &h[i]
		if r.Kind != Read || r.Outcome != OK {
			continue
		}
		// The newest write of the key acknowledged before the read was invoked.
		newest := int32(-1)
		var newestV hlc.Version
		ws := acked[r.Key]
		if n, _ := slices.BinarySearchFunc(ws, r.Invoke, func(w int32, t int64) int { return cmpInt(h[w].Return, t) }); n > 0 {
			newest = newestOf[r.Key][n-1]
			newestV = h[newest].Version
		}
		version := r.Version
		if r.Found {
			w, ok := byValue[r.Value]
			switch {
			case !ok:
				return &Violation{Checker: CheckerFresh, Reason: "read a value nobody wrote", Ops: []Op{*r}}
			case h[w].Key != r.Key:
				return &Violation{Checker: CheckerFresh, Reason: fmt.Sprintf("read of %s returned a value written to %s", r.Key, h[w].Key), Ops: []Op{h[w], *r}}
			case h[w].Outcome == Failed:
				return &Violation{Checker: CheckerFresh, Reason: "read the value of a write that failed (failed writes certainly did not take effect)", Ops: []Op{h[w], *r}}
			case h[w].Invoke > r.Return:
				return &Violation{Checker: CheckerFresh, Reason: "read a value whose write was invoked after the read returned", Ops: []Op{*r, h[w]}}
			case !h[w].Version.IsZero() && !r.Version.IsZero() && h[w].Version != r.Version:
				return &Violation{Checker: CheckerFresh, Reason: fmt.Sprintf("read returned version %v but the write it returned has version %v", r.Version, h[w].Version), Ops: []Op{h[w], *r}}
			}
			if version.IsZero() {
				version = h[w].Version // recorded without one: the write's
			}
		}
		if newest < 0 {
			continue
		}
		switch {
		case !r.Found:
			return &Violation{Checker: CheckerFresh, Reason: fmt.Sprintf("read %s as absent after write %q (version %v) to it was acknowledged", r.Key, h[newest].Value, newestV),
				Ops: []Op{h[newest], *r}}
		case version.Less(newestV):
			return &Violation{Checker: CheckerFresh, Reason: fmt.Sprintf("read %s=%q (version %v), older than write %q (version %v), acknowledged before the read was invoked",
				r.Key, r.Value, r.Version, h[newest].Value, newestV), Ops: []Op{h[newest], *r}}
		}
	}
	return nil
}
