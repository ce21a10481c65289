package raft

import "fmt"

// SetMutationForTest breaks e on purpose, as engine.Config.Mutation does at construction
// (tests of mutations that only a scripted scenario shows).
func SetMutationForTest(e *Engine, mutation string) { e.cfg.Mutation = mutation }

// QuiesceBlockers says why g (keyspace, partition) does not quiesce now ("" = it may).
func QuiesceBlockers(e *Engine, keyspace string, partition uint32) string {
	g := e.groups[groupKey{keyspace, partition}]
	if g == nil {
		return "no group"
	}
	st := g.rn.BasicStatus()
	last, _ := g.log.Storage().LastIndex()
	return fmt.Sprintf("idle=%d/%d pend=%d wait=%d send=%d recv=%v conf=%d out=%d inpl=%v state=%v lt=%d commit=%d last=%d applied=%d aterm=%d term=%d settled=%v q=%v",
		e.ticks-g.idleSince, g.quiesceAfterTicks(), g.pendingCount, len(g.waiting), len(g.sending), g.receiving != nil, g.confProposedAt, len(g.conf.GetVotersOutgoing()), g.inPlacement,
		st.RaftState, st.LeadTransferee, st.HardState.GetCommit(), last, g.applied, g.appliedTerm, st.HardState.GetTerm(), e.membershipSettled(g), g.quiesced)
}

// BrokenOf returns the groups e could not set up, with why.
func BrokenOf(e *Engine) map[string]string {
	out := map[string]string{}
	for k, why := range e.broken {
		out[fmt.Sprintf("%s/%d", k.keyspace, k.partition)] = why
	}
	return out
}

// SetTxnMutationForTest breaks the transaction cores of e's groups on purpose (a mutation of
// internal/sdur or internal/twopc): each core is saved and restored with it.
func SetTxnMutationForTest(e *Engine, mutation string) error {
	for _, g := range e.order {
		switch m := g.txn.(type) {
		case *sdurCore:
			m.opts.Mutation = mutation
		case *twopcCore:
			m.opts.Mutation = mutation
		default:
			continue
		}
		b, err := g.txn.snapshot()
		if err != nil {
			return err
		}
		if err := g.txn.restore(b, e.lastNow); err != nil {
			return err
		}
	}
	e.cfg.Mutation = mutation // cores restored after a restart of this engine keep it too
	return nil
}
