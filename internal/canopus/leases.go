package canopus

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"time"

	etcdraft "go.etcd.io/raft/v3"

	"meridian/internal/storage"
)

// Write leases (thesis 4.5.2). In every cycle a key either has its write lease active — every
// node may write it, and reads of it wait for the next cycle — or inactive: nobody writes it,
// and a node reads it at once from its committed state. A node that has a write for a key
// whose lease is not active asks for the lease in its next proposal; a lease asked for in
// cycle r is active in cycles [r+p+1, r+p+1+LeaseCycles) (p = MaxInFlight), and a node still
// writing the key asks again before it ends, so a key written often stays leased and one left
// alone lapses. Leases are decided from committed cycles alone, so every node applies them in
// the same cycles; and a node proposes cycle c only once it has committed cycle c−p, so every
// decision about cycle c is known to any node that proposes in it or reads during it. The
// table is stored with the cycle that changes it (one raw key per leased key), so a restarted
// node has it.

// leaseSpan is one period of a key's lease: active in cycles [from, to).
type leaseSpan struct{ from, to uint64 }

// active reports whether any of spans covers cycle c.
func leaseCovers(spans []leaseSpan, c uint64) bool {
	for _, s := range spans {
		if c >= s.from && c < s.to {
			return true
		}
	}
	return false
}

// pendingWrite is a write waiting for a proposal: its key (for the lease) and the request.
type pendingWrite struct {
	key, req []byte
}

// leaseActive reports whether key's write lease is active in cycle c. Without write leases
// every key is always writable.
func (n *Node) leaseActive(key []byte, c uint64) bool {
	if !n.opts.WriteLeases {
		return true
	}
	return leaseCovers(n.leases[string(key)], c)
}

// leaseEnd is the end of the lease of key that covers cycle c (0: none).
func (n *Node) leaseEnd(key []byte, c uint64) uint64 {
	end := uint64(0)
	for _, s := range n.leases[string(key)] {
		if s.to > c && s.from <= max(c, end) {
			end = max(end, s.to)
		}
	}
	return end
}

func (n *Node) leaseKey(key string) []byte {
	return append(append(append([]byte{}, n.cfg.Prefix...), 'l'), key...)
}

// applyLeases folds committed cycle c into the lease table: each request carried in it adds a
// span from c+p+1 (or from the end of the key's last span, so renewals leave no gap), and
// spans over by the next cycle are forgotten.
func (n *Node) applyLeases(c uint64, sets []RequestSet) {
	if !n.opts.WriteLeases {
		return
	}
	from := c + uint64(n.opts.MaxInFlight) + 1
	changed := map[string]bool{}
	for _, s := range sets {
		if s.Node == n.cfg.ID {
			for _, k := range s.LeaseKeys {
				delete(n.leaseAsked, string(k))
			}
		}
		for _, k := range s.LeaseKeys {
			spans := n.leases[string(k)]
			start := from
			if len(spans) > 0 {
				last := spans[len(spans)-1]
				if last.to > from+uint64(n.opts.LeaseCycles)/2 {
					continue // renewed already by an earlier request
				}
				start = max(start, last.to)
			}
			n.leases[string(k)] = append(spans, leaseSpan{from: start, to: start + uint64(n.opts.LeaseCycles)})
			n.leaseEnds[start+uint64(n.opts.LeaseCycles)] = append(n.leaseEnds[start+uint64(n.opts.LeaseCycles)], string(k))
			changed[string(k)] = true
		}
	}
	for _, k := range n.leaseEnds[c+1] {
		spans := slices.DeleteFunc(n.leases[k], func(s leaseSpan) bool { return s.to <= c+1 })
		if len(spans) == 0 {
			delete(n.leases, k)
		} else {
			n.leases[k] = spans
		}
		changed[k] = true
	}
	delete(n.leaseEnds, c+1)
	for _, k := range slices.Sorted(maps.Keys(changed)) {
		spans := n.leases[k]
		if len(spans) == 0 {
			n.out.Raw = append(n.out.Raw, storage.RawOp{Key: n.leaseKey(k), Delete: true})
			continue
		}
		b := make([]byte, 0, 16*len(spans))
		for _, s := range spans {
			b = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(b, s.from), s.to)
		}
		n.out.Raw = append(n.out.Raw, storage.RawOp{Key: n.leaseKey(k), Value: b})
	}
}

// loadLeases reads the stored lease table.
func (n *Node) loadLeases() error {
	pre := n.leaseKey("")
	end := append(append([]byte{}, n.cfg.Prefix...), 'l'+1)
	var bad error
	err := n.cfg.Store.ScanRaw(pre, end, 0, func(k, v []byte) bool {
		if len(v)%16 != 0 || len(v) == 0 {
			bad = fmt.Errorf("canopus: lease of %q: %d bytes (%w)", k[len(pre):], len(v), storage.ErrCorrupt)
			return false
		}
		key := string(k[len(pre):])
		for i := 0; i < len(v); i += 16 {
			s := leaseSpan{binary.BigEndian.Uint64(v[i:]), binary.BigEndian.Uint64(v[i+8:])}
			n.leases[key] = append(n.leases[key], s)
			n.leaseEnds[s.to] = append(n.leaseEnds[s.to], key)
		}
		return true
	})
	if err == nil {
		err = bad
	}
	return err
}

// leaseFree reports whether key can be read from the committed state now: its lease is not
// active in any cycle this node has started and not committed (every write of it acknowledged
// anywhere is then committed here; ReadNow).
func (n *Node) leaseFree(key []byte) bool {
	if !n.opts.WriteLeases {
		return false
	}
	spans := n.leases[string(key)]
	if len(spans) == 0 {
		return true
	}
	last := n.proposed
	if n.cfg.Mutation == MutationLeaseIgnoresPending {
		last = n.committed + 1 // broken: only the next cycle is looked at
	}
	for c := n.committed + 1; c <= last; c++ {
		if leaseCovers(spans, c) {
			return false
		}
	}
	return true
}

// ReadNow starts a read of key that may be served from the committed state without waiting
// for a cycle: the key's lease is inactive in every cycle in flight here, and this node still
// leads its own broadcast group (confirmed by a read index in the super-leaf, a local round
// trip: a node whose epoch another member closed cannot tell which cycles went on without
// it). It returns false when the read must take the cycle path (ReadFence). The outcome comes
// in Ready.ReadsNow (ok) or Ready.ReadsFenced (the cycle to wait for).
func (n *Node) ReadNow(now time.Time, id uint64, key []byte) bool {
	defer n.guard()
	n.now = now
	g := n.groups[n.cfg.ID]
	if !n.leaseFree(key) || n.Closed() || g.lead != uint64(n.cfg.ID) || len(n.confirming) >= n.opts.MaxBuffered {
		return false
	}
	ctx := binary.BigEndian.AppendUint64(nil, id)
	n.confirming[id] = confirmRead{key: key, at: now}
	g.rn.ReadIndex(ctx)
	return true
}

type confirmRead struct {
	key   []byte
	at    time.Time
	index uint64 // the read index once known (0: not yet)
}

// confirmReads resolves reads whose read index came back and is applied: served now if the
// key is still free, else sent to the cycle path. Reads whose confirmation is lost (a leader
// change drops read indexes) go to the cycle path after an election timeout.
func (n *Node) confirmReads(rs []etcdraft.ReadState) {
	for _, r := range rs {
		if len(r.RequestCtx) != 8 {
			continue
		}
		id := binary.BigEndian.Uint64(r.RequestCtx)
		if cr, ok := n.confirming[id]; ok {
			cr.index = r.Index
			n.confirming[id] = cr
		}
	}
}

func (n *Node) resolveReads() {
	if len(n.confirming) == 0 {
		return
	}
	g := n.groups[n.cfg.ID]
	timeout := time.Duration(n.opts.ElectionTicks) * n.opts.Tick
	for _, id := range slices.Sorted(maps.Keys(n.confirming)) {
		cr := n.confirming[id]
		switch {
		case cr.index != 0 && g.applied >= cr.index:
			delete(n.confirming, id)
			if !n.Closed() && n.leaseFree(cr.key) {
				n.out.ReadsNow = append(n.out.ReadsNow, id)
				continue
			}
			n.out.ReadsFenced = append(n.out.ReadsFenced, FencedRead{ID: id, Fence: n.fence()})
		case n.now.Sub(cr.at) >= timeout || g.lead != uint64(n.cfg.ID):
			delete(n.confirming, id)
			n.out.ReadsFenced = append(n.out.ReadsFenced, FencedRead{ID: id, Fence: n.fence()})
		}
	}
}

// FencedRead is a read that must wait for cycle Fence after all (ReadNow could not serve it).
type FencedRead struct {
	ID    uint64
	Fence uint64
}

// Lease mutations.
const (
	// MutationLeaseIgnoresPending: a read at once checks the lease in the next cycle only,
	// not in every cycle in flight.
	MutationLeaseIgnoresPending = "lease-ignores-pending-write"
)
