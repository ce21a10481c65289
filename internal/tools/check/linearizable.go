package check

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// regState is a register's state, and a read's output: absent, or a value.
type regState struct {
	found bool
	value string
}

// regInput is a register operation: a write of value, or a read.
type regInput struct {
	write bool
	value string
}

// registerModel is one key: initially absent, a write sets the value, a read returns the
// current state. Histories are split by key before checking, so the model never sees two keys
// (Porcupine's P-compositionality: a history is linearizable iff each key's is).
var registerModel = porcupine.Model{
	Init: func() any { return regState{} },
	Step: func(state, input, output any) (bool, any) {
		in := input.(regInput)
		if in.write {
			return true, regState{found: true, value: in.value}
		}
		return output.(regState) == state.(regState), state
	},
	Hash: func(state any) uint64 {
		// FNV-1a; only used to bucket Porcupine's cache of visited states.
		s := state.(regState)
		h := uint64(14695981039346656037)
		for i := 0; i < len(s.value); i++ {
			h ^= uint64(s.value[i])
			h *= 1099511628211
		}
		if s.found {
			h ^= 1
		}
		return h
	},
	DescribeOperation: func(input, output any) string {
		in := input.(regInput)
		if in.write {
			return fmt.Sprintf("write %q", in.value)
		}
		if out := output.(regState); out.found {
			return fmt.Sprintf("read -> %q", out.value)
		}
		return "read -> absent"
	},
}

// linIncluded says whether op takes part in the linearizability check. Failed and
// indeterminate reads have no effect and returned nothing to check; failed writes certainly
// did not take effect. Indeterminate writes stay, as pending operations.
func linIncluded(op *Op) bool {
	if op.Kind == Read {
		return op.Outcome == OK
	}
	return op.Outcome != Failed
}

// porcupineOp converts an op. An indeterminate write gets Return = MaxInt64: Porcupine may
// then linearize it at any point after its invocation — including after every other op, where
// it is invisible, which is how "it may never have happened" is expressed without a
// nondeterministic model. linOps tightens that where it provably changes nothing.
func porcupineOp(op *Op) porcupine.Operation {
	ret := op.Return
	if op.Outcome == Indeterminate {
		ret = math.MaxInt64
	}
	if op.Kind == Write {
		return porcupine.Operation{ClientId: op.Process, Input: regInput{write: true, value: op.Value}, Call: op.Invoke, Output: regState{}, Return: ret}
	}
	out := regState{}
	if op.Found {
		out = regState{found: true, value: op.Value}
	}
	return porcupine.Operation{ClientId: op.Process, Input: regInput{}, Call: op.Invoke, Output: out, Return: ret}
}

// linOps converts one key's ops (ids) for Porcupine, rewriting indeterminate writes in two
// ways that keep the answer exactly the same but spare Porcupine the exponential search that
// open-ended operations cause on illegal histories:
//   - an indeterminate write no read in ids returned is dropped: with an infinite return it
//     can always be linearized last, where it is invisible, and without it nothing changes;
//   - an indeterminate write some read returned gets, as its return time, the earliest return
//     among those reads: it must be linearized before each of them anyway.
//
// (A read returning before its write was invoked is left pending-write-at-infinity; the
// checker finds such a read illegal either way.)
func linOps(h History, ids []int32) []porcupine.Operation {
	firstRead := make(map[string]int64)
	for _, i := range ids {
		r := &h[i]
		if r.Kind == Read && r.Found {
			if t, ok := firstRead[r.Value]; !ok || r.Return < t {
				firstRead[r.Value] = r.Return
			}
		}
	}
	ops := make([]porcupine.Operation, 0, len(ids))
	for _, i := range ids {
		op := &h[i]
		pop := porcupineOp(op)
		if op.Kind == Write && op.Outcome == Indeterminate {
			t, read := firstRead[op.Value]
			if !read {
				continue
			}
			if t >= op.Invoke {
				pop.Return = t
			}
		}
		ops = append(ops, pop)
	}
	return ops
}

// Linearizable checks each key's register history with Porcupine, bounding each key's search
// by timeout (0: unbounded). Keys are checked in sorted order and the first illegal key is
// explained; a key that times out makes the result Unknown (unless another key is Illegal) —
// neither a pass nor a violation.
//
// Included: OK reads; OK writes; Indeterminate writes as pending operations (may take effect
// at any time after invocation, or never — see linOps for how that reaches Porcupine). Failed
// ops and non-OK reads are dropped: a failed write certainly had no effect, so a read of its
// value is a violation.
//
// Each key first gets a direct search for the common shapes of violation (a read of a value no
// included write of the key wrote, a read that returned before its write began, a read that
// missed a write which was in effect — acknowledged or observed — after the returned write
// and before the read began). Those finds are proofs with two to five ops, and they spare
// Porcupine its exhaustive search, which on an illegal history can run to the timeout. Only a
// key with no such shape goes to Porcupine; if it is illegal, the explanation is shrunk
// greedily with Porcupine (linShrink). Either way the violation's ops have no linearization
// on their own.
func Linearizable(h History, timeout time.Duration) (Result, *Violation) {
	order := invocationOrder(h)
	byKey := make(map[string][]int32)
	for _, i := range order {
		if linIncluded(&h[i]) {
			byKey[h[i].Key] = append(byKey[h[i].Key], i)
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	result := Ok
	for _, k := range keys {
		idx := byKey[k]
		// The direct search is cheap and its finds are proofs; Porcupine is for the rest.
		if v := linPattern(h, idx); v != nil {
			return Illegal, v
		}
		switch porcupine.CheckOperationsTimeout(registerModel, linOps(h, idx), timeout) {
		case porcupine.Illegal:
			return Illegal, explainLinearizability(h, k, idx, timeout)
		case porcupine.Unknown:
			result = Unknown
		}
	}
	return result, nil
}

func explainLinearizability(h History, key string, idx []int32, timeout time.Duration) *Violation {
	kept := linShrink(h, idx, timeout)
	return &Violation{
		Checker: CheckerLinearizable,
		Reason:  fmt.Sprintf("these %d ops on %s have no linearization (shrunk from %d)", len(kept), key, len(idx)),
		Ops:     opsOf(h, kept),
	}
}

// linPattern looks for a small, self-evident non-linearizable sub-history of one key's ops
// (idx, in invocation order). Each shape below is illegal in every linearization, so the
// ops it names are a proof on their own.
func linPattern(h History, idx []int32) *Violation {
	// The key's included writes, by value.
	local := make(map[string]int32)
	for _, i := range idx {
		if h[i].Kind == Write {
			local[h[i].Value] = i
		}
	}
	// eff[w].at: the time by which write w had certainly taken effect — its acknowledgement or
	// the earliest return of a read that observed it; eff[w].by is the op that shows it.
	type effect struct {
		at int64
		by int32
	}
	eff := make(map[int32]effect, len(local))
	for _, w := range local {
		e := effect{at: math.MaxInt64, by: -1}
		if h[w].Outcome == OK {
			e = effect{at: h[w].Return, by: w}
		}
		eff[w] = e
	}
	for _, i := range idx {
		r := &h[i]
		if r.Kind != Read || !r.Found {
			continue
		}
		if w, ok := local[r.Value]; ok && r.Return < eff[w].at {
			eff[w] = effect{at: r.Return, by: i}
		}
	}
	withEvidence := func(ids []int32, w int32) []int32 {
		if by := eff[w].by; by != w && by >= 0 {
			return append(ids, w, by)
		}
		return append(ids, w)
	}
	for _, i := range idx {
		r := &h[i]
		if r.Kind != Read {
			continue
		}
		w := int32(-1)
		if r.Found {
			var ok bool
			if w, ok = local[r.Value]; !ok {
				for j := range h {
					if h[j].Kind == Write && h[j].Value == r.Value {
						reason := "read the value of a write that failed (failed writes certainly did not take effect)"
						if h[j].Key != r.Key {
							reason = fmt.Sprintf("read of %s returned a value written to %s", r.Key, h[j].Key)
						}
						return &Violation{Checker: CheckerLinearizable, Reason: reason, Ops: []Op{h[j], *r}}
					}
				}
				return &Violation{Checker: CheckerLinearizable, Reason: "read a value nobody wrote", Ops: []Op{*r}}
			}
			if r.Return < h[w].Invoke {
				return &Violation{Checker: CheckerLinearizable, Reason: "read returned a value before the write of it was invoked", Ops: []Op{*r, h[w]}}
			}
		}
	}
	// Every read now returned a value its key's write could have produced, so each eff is
	// genuine evidence.
	for _, i := range idx {
		r := &h[i]
		if r.Kind != Read {
			continue
		}
		w := int32(-1)
		if r.Found {
			w = local[r.Value]
		}
		for _, w2 := range idx {
			if h[w2].Kind != Write || w2 == w {
				continue
			}
			if !(eff[w2].at < r.Invoke) || (w >= 0 && !(eff[w].at < h[w2].Invoke)) {
				continue
			}
			var ids []int32
			var reason string
			if w >= 0 {
				ids = withEvidence(ids, w)
				reason = fmt.Sprintf("stale read: %s returned %q, but write %q began after %q was in effect and was itself in effect before the read began",
					r.Key, r.Value, h[w2].Value, r.Value)
			} else {
				reason = fmt.Sprintf("stale read: %s returned absent, but write %q was in effect before the read began", r.Key, h[w2].Value)
			}
			ids = withEvidence(ids, w2)
			ids = append(ids, i)
			return &Violation{Checker: CheckerLinearizable, Reason: reason, Ops: opsOf(h, ids)}
		}
	}
	return nil
}

// maxShrinkChecks bounds the Porcupine runs spent minimizing one explanation.
const maxShrinkChecks = 300

// linShrink greedily removes ops from an illegal key history while it stays illegal
// (delta-debugging with halving chunks). Only removals that keep illegality meaningful are
// tried: any read, and a write none of whose remaining readers stays behind — dropping a write
// somebody read would manufacture a "read a value nobody wrote". Dropping a read, or a write
// nobody reads, from a linearizable history leaves it linearizable, so the shrunk history is
// itself a proof. All runs together are bounded by timeout (a second when unbounded), so an
// explanation costs at most as much again as the check; a run cut short keeps the ops it
// tried to drop. The result is small, not necessarily minimum, and under heavy load may be
// less small (the verdict itself never depends on the shrinking).
func linShrink(h History, idx []int32, timeout time.Duration) []int32 {
	if timeout <= 0 {
		timeout = time.Second
	}
	deadline := time.Now().Add(timeout)
	writer := make(map[string]int32)
	for _, i := range idx {
		if h[i].Kind == Write {
			writer[h[i].Value] = i
		}
	}
	// readers[w] counts the remaining reads of w.
	readers := make(map[int32]int)
	for _, i := range idx {
		if h[i].Kind == Read && h[i].Found {
			if w, ok := writer[h[i].Value]; ok {
				readers[w]++
			}
		}
	}
	cur := slices.Clone(idx)
	checks := 0
	illegal := func(ids []int32) bool {
		checks++
		left := time.Until(deadline)
		if left <= 0 {
			checks = maxShrinkChecks // out of time: stop shrinking
			return false
		}
		return porcupine.CheckOperationsTimeout(registerModel, linOps(h, ids), left) == porcupine.Illegal
	}
	for chunk := (len(cur) + 1) / 2; chunk >= 1 && checks < maxShrinkChecks; chunk /= 2 {
		for start := 0; start < len(cur) && checks < maxShrinkChecks; {
			end := min(start+chunk, len(cur))
			// Readers removed with this chunk, per write.
			gone := make(map[int32]int)
			for _, i := range cur[start:end] {
				if h[i].Kind == Read && h[i].Found {
					if w, ok := writer[h[i].Value]; ok {
						gone[w]++
					}
				}
			}
			cand := make([]int32, 0, len(cur))
			cand = append(cand, cur[:start]...)
			for _, i := range cur[start:end] {
				if h[i].Kind == Write && readers[i] > gone[i] {
					cand = append(cand, i) // still read by an op that stays
				}
			}
			kept := len(cand) - start
			cand = append(cand, cur[end:]...)
			if len(cand) == len(cur) || !illegal(cand) {
				start = end
				continue
			}
			for w, n := range gone {
				readers[w] -= n
			}
			cur = cand
			start += kept
		}
	}
	return cur
}
