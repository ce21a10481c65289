package check

import (
	"fmt"
	"slices"
	"strings"
)

// Durable checks that every acknowledged (OK) write survived: some replica's final state of
// its key holds the write itself (same version and value) or a newer version. final is the
// replicas' states after faults healed and the cluster quiesced. A tombstone (Found=false with
// a version) counts as a newer version. A key with OK writes that no replica holds — absent
// everywhere or not listed at all — loses them. Failed and indeterminate writes promise
// nothing, so losing them is fine. It returns the first lost write in invocation order,
// explained with the key's final states; nil when nothing was lost.
func Durable(h History, final []ReplicaState) *Violation {
	byKey := statesByKey(final)
	for _, i := range invocationOrder(h) {
		w := &h[i]
		if w.Kind != Write || w.Outcome != OK {
			continue
		}
		states := byKey[w.Key]
		kept := false
		for _, s := range states {
			c := s.Version.Compare(w.Version)
			if c > 0 || (c == 0 && s.Found && s.Value == w.Value) {
				kept = true
				break
			}
		}
		if kept {
			continue
		}
		reason := fmt.Sprintf("acknowledged write to %s is lost: no replica holds it or a newer version; final states: %s",
			w.Key, describeStates(states))
		if len(states) == 0 {
			reason = fmt.Sprintf("acknowledged write to %s is lost: no replica reported the key", w.Key)
		}
		return &Violation{Checker: CheckerDurable, Reason: reason, Ops: []Op{*w}}
	}
	return nil
}

// Converged checks that, after quiescence, all replicas listed for a key agree on its newest
// (Found, Version, Value) — anti-entropy and read repair must have finished their job. It
// returns the first disagreeing key in sorted order, naming every replica's state.
func Converged(final []ReplicaState) *Violation {
	byKey := statesByKey(final)
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		states := byKey[k]
		for _, s := range states[1:] {
			a := states[0]
			if s.Found != a.Found || s.Version != a.Version || s.Value != a.Value {
				return &Violation{
					Checker: CheckerConvergent,
					Reason:  fmt.Sprintf("replicas disagree on %s after quiescence: %s", k, describeStates(states)),
				}
			}
		}
	}
	return nil
}

func statesByKey(final []ReplicaState) map[string][]ReplicaState {
	m := make(map[string][]ReplicaState)
	for _, s := range final {
		m[s.Key] = append(m[s.Key], s)
	}
	return m
}

// describeStates renders replica states sorted by node, e.g. `n1: "a" v=5.0@1; n2: absent`.
func describeStates(states []ReplicaState) string {
	if len(states) == 0 {
		return "none"
	}
	s := slices.Clone(states)
	slices.SortFunc(s, func(a, b ReplicaState) int { return strings.Compare(a.Node, b.Node) })
	parts := make([]string, len(s))
	for i, st := range s {
		switch {
		case st.Found:
			parts[i] = fmt.Sprintf("%s: %q v=%v", st.Node, st.Value, st.Version)
		case !st.Version.IsZero():
			parts[i] = fmt.Sprintf("%s: deleted v=%v", st.Node, st.Version)
		default:
			parts[i] = fmt.Sprintf("%s: absent", st.Node)
		}
	}
	return strings.Join(parts, "; ")
}
