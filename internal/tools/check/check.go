package check

import (
	"time"
)

// Result is the three-valued outcome of a check that may run out of time.
type Result int

const (
	// Ok: the history satisfies the property.
	Ok Result = iota + 1
	// Illegal: the history violates the property; a Violation explains it.
	Illegal
	// Unknown: the check ran out of time. It is neither a pass nor a violation: a seed whose
	// check timed out proves nothing either way.
	Unknown
)

func (r Result) String() string {
	switch r {
	case Ok:
		return "ok"
	case Illegal:
		return "illegal"
	case Unknown:
		return "unknown"
	}
	return "invalid-result"
}

// Checker names used in Violation.Checker.
const (
	CheckerHistory      = "history"
	CheckerLinearizable = "linearizability"
	CheckerSequential   = "sequential-consistency"
	CheckerFresh        = "fresh-reads"
	CheckerDurable      = "durability"
	CheckerConvergent   = "convergence"
)

// Options selects the checks CheckAll runs beyond the always-on ones.
type Options struct {
	// Linearizability runs the Porcupine check; protocols that only promise sequential
	// consistency (MeteorShower) are expected to fail it, so it is opt-in.
	Linearizability bool
	// LinearizabilityTimeout bounds the Porcupine search per key (0: unbounded). A key whose
	// search times out makes the check Unknown, which CheckAll does not report; call
	// Linearizable directly to see it.
	LinearizabilityTimeout time.Duration
	// FreshReads checks that every read returns the newest acknowledged write or a newer one
	// (FreshReads) instead of checking sequential consistency: what reads at ONE or LOCAL_ONE
	// promise when R + W > N, where sequential consistency does not hold.
	FreshReads bool
}

// CheckAll validates the history and runs sequential consistency (or, when asked, fresh
// reads instead), durability, convergence and, when asked, linearizability. It returns every violation found (at most one per
// checker), nil when all pass. A malformed history yields a single "history" violation and no
// other check runs, because every checker relies on Validate's invariants.
func CheckAll(h History, final []ReplicaState, opts Options) []*Violation {
	if err := h.Validate(); err != nil {
		return []*Violation{{Checker: CheckerHistory, Reason: err.Error()}}
	}
	var out []*Violation
	if opts.FreshReads {
		if v := FreshReads(h); v != nil {
			out = append(out, v)
		}
	} else if v := SequentiallyConsistent(h); v != nil {
		out = append(out, v)
	}
	if v := Durable(h, final); v != nil {
		out = append(out, v)
	}
	if v := Converged(final); v != nil {
		out = append(out, v)
	}
	if opts.Linearizability {
		if res, v := Linearizable(h, opts.LinearizabilityTimeout); res == Illegal && v != nil {
			out = append(out, v)
		}
	}
	return out
}
