package check

import (
	"fmt"
	"slices"
)

// Validate rejects histories the checkers cannot interpret. A malformed history is a bug in
// whatever recorded it (the simulator, a test), not in the system under test, so it is
// reported as an error rather than as a violation: checking it would blame the store for the
// recorder's mistake.
//
// It rejects:
//   - an unknown Kind or Outcome;
//   - duplicate op IDs;
//   - an OK or Failed op whose Return precedes its Invoke (Return is only meaningless for
//     Indeterminate ops);
//   - a process with overlapping ops: a process is sequential, so each op must be invoked at
//     or after the Return of the process's previous OK/Failed op (an Indeterminate op was
//     abandoned at an unknown time, so it constrains only the invocation order);
//   - a write with an empty value (reads could not tell it from "absent");
//   - two writes of the same value (checkers identify the write a read returned by its value);
//   - an OK write without a Version: the sequential-consistency witness orders writes by
//     version (DESIGN.md section 3: every response carries its version);
//   - a group (Op.Group) that is not one client operation: a member that is not a read,
//     members that differ in process, outcome or times, two members of one key, or a group
//     whose members another op of their process comes between. The members of a group
//     overlap one another, which is no overlap of the process.
func (h History) Validate() error {
	ids := make(map[int]int, len(h))
	values := make(map[string]int, len(h)/2)
	var groups map[int]int                // group → index of its first member
	var groupKeys map[int]map[string]bool // group → keys its members read
	for i := range h {
		op := &h[i]
		if op.Group != 0 {
			if op.Kind != Read {
				return fmt.Errorf("check: op#%d of group %d is not a read (a group is one multi-key read): %s", op.ID, op.Group, *op)
			}
			if groups == nil {
				groups, groupKeys = map[int]int{}, map[int]map[string]bool{}
			}
			if j, ok := groups[op.Group]; ok {
				f := &h[j]
				if f.Process != op.Process || f.Outcome != op.Outcome || f.Invoke != op.Invoke || f.Return != op.Return {
					return fmt.Errorf("check: ops of group %d differ in process, outcome or times (a group is one client operation):\n    %s\n    %s", op.Group, *f, *op)
				}
				if groupKeys[op.Group][op.Key] {
					return fmt.Errorf("check: group %d reads %s twice: %s", op.Group, op.Key, *op)
				}
			} else {
				groups[op.Group] = i
				groupKeys[op.Group] = map[string]bool{}
			}
			groupKeys[op.Group][op.Key] = true
		}
		if op.Kind != Read && op.Kind != Write {
			return fmt.Errorf("check: op#%d has unknown kind %d", op.ID, op.Kind)
		}
		if op.Outcome != OK && op.Outcome != Failed && op.Outcome != Indeterminate {
			return fmt.Errorf("check: op#%d has unknown outcome %d", op.ID, op.Outcome)
		}
		if j, dup := ids[op.ID]; dup {
			return fmt.Errorf("check: duplicate op ID %d:\n    %s\n    %s", op.ID, h[j], *op)
		}
		ids[op.ID] = i
		if op.Outcome != Indeterminate && op.Return < op.Invoke {
			return fmt.Errorf("check: op returned before it was invoked: %s", *op)
		}
		if op.Kind == Write {
			if op.Value == "" {
				return fmt.Errorf("check: write with an empty value: %s", *op)
			}
			if j, dup := values[op.Value]; dup {
				return fmt.Errorf("check: value %q written twice (written values must be unique):\n    %s\n    %s", op.Value, h[j], *op)
			}
			values[op.Value] = i
			if op.Outcome == OK && op.Version.IsZero() {
				return fmt.Errorf("check: acknowledged write without a version: %s", *op)
			}
		}
	}
	// Process order: walk the history in invocation order, remembering each process's last op.
	last := newProcMap(h)
	var started map[int]bool // groups whose first member the walk has passed
	for _, i := range invocationOrder(h) {
		cur := &h[i]
		j := last.get(cur.Process)
		if cur.Group != 0 && (j < 0 || h[j].Group != cur.Group) {
			if started[cur.Group] {
				return fmt.Errorf("check: another op of process %d comes between the ops of group %d: %s", cur.Process, cur.Group, *cur)
			}
			if started == nil {
				started = map[int]bool{}
			}
			started[cur.Group] = true
		}
		if j >= 0 && (cur.Group == 0 || h[j].Group != cur.Group) {
			prev := &h[j]
			if prev.Outcome != Indeterminate && cur.Invoke < prev.Return {
				return fmt.Errorf("check: process %d has overlapping ops (a process is sequential):\n    %s\n    %s", cur.Process, *prev, *cur)
			}
		}
		last.set(cur.Process, i)
	}
	return nil
}

func cmpInt[T int | int32 | int64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// cmpInvocation orders ops by invocation time, then ID: the order in which a sequential
// process issued them.
func cmpInvocation(x, y *Op) int {
	if c := cmpInt(x.Invoke, y.Invoke); c != 0 {
		return c
	}
	return cmpInt(x.ID, y.ID)
}

// invocationOrder returns the indices of h in invocation order. The recorder appends ops as
// they are invoked, so the common case is the identity and costs no sort.
func invocationOrder(h History) []int32 {
	idx := make([]int32, len(h))
	sorted := true
	for i := range idx {
		idx[i] = int32(i)
		if i > 0 && cmpInvocation(&h[i-1], &h[i]) > 0 {
			sorted = false
		}
	}
	if !sorted {
		slices.SortFunc(idx, func(a, b int32) int { return cmpInvocation(&h[a], &h[b]) })
	}
	return idx
}
