package txnsim

import (
	"encoding/binary"
	"fmt"
	"sort"
	"time"

	"meridian/internal/sdur"
)

// readReq is a read of some keys of one partition at a replica (Algorithm 1, lines 10-13):
// at the snapshot given, or at the replica's current one.
type readReq struct {
	keys     []string
	snapshot uint64
	has      bool
	reply    func(values map[string][]int64, versions map[string]uint64, snapshot uint64)
}

// serveRead answers a read at g, or queues it until g has completed up to its snapshot.
func (s *cluster) serveRead(g *group, r *readReq) {
	if r.has && r.snapshot > g.rep.readVersion() {
		if len(g.readWait) < 1<<16 {
			g.readWait = append(g.readWait, r)
		}
		return
	}
	st := g.rep.readVersion()
	if r.has {
		st = r.snapshot
	}
	out := make(map[string][]int64, len(r.keys))
	versions := make(map[string]uint64, len(r.keys))
	for _, k := range r.keys {
		out[k], versions[k] = readAt(g.store[k], st)
	}
	r.reply(out, versions, st)
}

func (s *cluster) serveWaitingReads(n *node, g *group) {
	if len(g.readWait) == 0 {
		return
	}
	waiting := g.readWait
	g.readWait = nil
	for _, r := range waiting {
		s.serveRead(g, r)
	}
}

// readAt returns the newest value at or below st and its version (versions are appended in
// index order; 0: none).
func readAt(vs []version, st uint64) ([]int64, uint64) {
	i := sort.Search(len(vs), func(i int) bool { return vs[i].index > st })
	if i == 0 {
		return nil, 0
	}
	return vs[i-1].value, vs[i-1].index
}

// submission is a transaction its submitter has broadcast and waits on.
type submission struct {
	id       sdur.TxnID
	done     func(txnResult)
	resend   func()
	finished bool
	since    time.Duration
	global   bool
	parts    []*sdur.Part // SDUR's parts (the delay estimator)
}

func (s *cluster) retry(n *node, sub *submission, epoch int) {
	s.after(s.opts.SubmitRetry, func() {
		if !n.up || n.epoch != epoch || sub.finished {
			return
		}
		sub.resend()
		s.stats.Resubmits++
		s.retry(n, sub, epoch)
	})
}

// outcome reaches the submitter: the first outcome of a transaction decides (every replica
// decides alike).
func (s *cluster) outcome(n *node, r txnResult) {
	sub := n.submitted[r.id]
	if sub == nil || sub.finished {
		return
	}
	sub.finished = true
	delete(n.submitted, r.id)
	s.delay.finish(n, r.id)
	sub.done(r)
}

// encodeList and decodeList are a list value (list-append keys).
func encodeList(l []int64) []byte {
	b := make([]byte, 0, 8*len(l))
	for _, v := range l {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return b
}

func decodeList(b []byte) []int64 {
	out := make([]int64, 0, len(b)/8)
	for i := 0; i+8 <= len(b); i += 8 {
		out = append(out, int64(binary.BigEndian.Uint64(b[i:])))
	}
	return out
}

// keyName is a key of partition pid (partitions are key prefixes in the simulation).
func keyName(pid uint32, name string) string { return fmt.Sprintf("%d/%s", pid, name) }

// keyPartition returns a key's partition.
func keyPartition(k string) uint32 {
	var p uint32
	for i := 0; i < len(k) && k[i] != '/'; i++ {
		p = p*10 + uint32(k[i]-'0')
	}
	return p
}
