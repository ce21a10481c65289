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
