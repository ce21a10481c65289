package txnsim

import (
	"sort"

	"meridian/internal/sdur"
)

// mode is a transaction protocol on the simulated cluster. The modes register in modes; the
// rest of the simulator names none.
type mode interface {
	// newReplica returns a replica of partition p for the log to feed.
	newReplica(s *cluster, p *partition) (replica, error)
	// restore returns a replica at a state its save returned.
	restore(s *cluster, p *partition, saved any) (replica, error)
	// start begins the mode's background work (ticks, snapshot sequencer).
	start(s *cluster)
	// submit commits a transaction's parts from node n (its submitter) and calls done with
	// the outcome there.
	submit(s *cluster, n *node, id sdur.TxnID, parts []*txnPart)
	// readOnly runs a read-only transaction for client c.
	readOnly(c *client, class string, body func(read func(keys []string, cb func(map[string][]int64))), done func())
	mutations() map[string]string
}

// replica is a mode's state machine of one partition replica.
type replica interface {
	// deliver hands it the entry at index of its partition's log.
	deliver(s *cluster, n *node, g *group, index uint64, payload any)
	tick(s *cluster, n *node, g *group)
	// drain carries out its output.
	drain(s *cluster, n *node, g *group)
	setLeader(leader bool)
	// setReplay: a restarted replica will be delivered its log again up to index.
	setReplay(index uint64)
	// readVersion is the counter a read at "now" uses (versions of the store are at or
	// below it).
	readVersion() uint64
	pendingCount() int
	// save returns the replica's state for a restart to begin from (false: the mode restarts
	// by delivering its whole log again).
	save() (any, bool)
}

// txnPart is a transaction's part for one partition, as the client built it.
type txnPart struct {
	partition  uint32
	partitions []uint32
	snapshot   uint64
	reads      []string
	// readVersions are the versions the reads returned (2PC validates them).
	readVersions []uint64
	writes       []sdur.Write
}

var modes = map[string]mode{}

func modeNames() []string {
	out := make([]string, 0, len(modes))
	for n := range modes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Modes lists the transaction modes the simulator runs.
func Modes() []string { return modeNames() }

// Mutations returns a mode's deliberately broken variants.
func Mutations(mode string) map[string]string {
	if m, ok := modes[mode]; ok {
		return m.mutations()
	}
	return nil
}

// track registers a transaction its submitter n waits on: resend broadcasts it again (after
// SubmitRetry without an outcome), done gets the first outcome.
func (s *cluster) track(n *node, id sdur.TxnID, global bool, resend func(), done func(txnResult)) {
	sub := &submission{id: id, done: done, since: s.now, global: global, resend: resend}
	n.submitted[id] = sub
	s.retry(n, sub, n.epoch)
}

// txnResult is a transaction's outcome as its submitter learns it.
type txnResult struct {
	id        sdur.TxnID
	committed bool
	reason    string
	key       string
}
