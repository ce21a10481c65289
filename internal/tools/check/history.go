// Package check holds Meridian's consistency checkers. They read a History — what clients
// invoked and what they were told, with times — and say whether it is linearizable
// (Porcupine), sequentially consistent (the witness order of the MeteorShower proof, paper
// II-D), fresh (every read returns the newest acknowledged write or a newer one), durable
// (every acknowledged write survives) and convergent (replicas agree after quiescence).
// DESIGN.md section 6.
//
// Outcomes are three-valued: an operation that failed with "unavailable" or "invalid" did not
// take effect; one that timed out or was cut off by a crash is indeterminate — it may or may
// not have taken effect, and no checker may count it either way.
package check

import (
	"fmt"

	"meridian/internal/hlc"
)

// Kind is the operation type.
type Kind uint8

const (
	Read Kind = iota + 1
	Write
)

func (k Kind) String() string {
	if k == Read {
		return "read"
	}
	return "write"
}

// Outcome is what the client learned.
type Outcome uint8

const (
	// OK: the operation completed; for a read, Value/Found/Version are what it returned; for a
	// write, Version is the version the write was stamped with.
	OK Outcome = iota + 1
	// Failed: the operation certainly did not take effect (unavailable, invalid).
	Failed
	// Indeterminate: timed out or lost; a write may or may not have taken effect.
	Indeterminate
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Failed:
		return "failed"
	}
	return "indeterminate"
}

// Op is one client operation. Times are virtual (the simulator's) nanoseconds; NodeInvoke and
// NodeReturn are the coordinator's local clock readings (which differ under clock skew).
type Op struct {
	// ID is unique in the history. Recorders number ops in invocation order where they can;
	// the simulator records a scan's reads when the scan returns, so their IDs may be larger
	// than those of ops invoked after the scan (checkers order ops by Invoke, then ID).
	ID      int
	Process int    // the client (a sequential process)
	Kind    Kind   // Read or Write
	Key     string // one register per key
	// Value written (Write) or read (Read, when Found). Written values are unique per history.
	Value string
	Found bool // Read: a value was returned (false: key absent)
	// Version of the value read or written (zero when unknown: absent key, failed write).
	Version    hlc.Version
	Outcome    Outcome
	Invoke     int64 // virtual time of invocation
	Return     int64 // virtual time of the response; meaningless when Indeterminate
	NodeInvoke int64 // coordinator's local clock at invocation (0 if unknown)
	NodeReturn int64
	Node       string // coordinator
	// Group, when nonzero, makes the op one key's part of a multi-key read (a scan, recorded
	// as one read per key it covered; DESIGN.md section 6, docs/simulation.md "Scans"). The
	// ops of a group are one client operation: they share their process, kind (Read),
	// outcome and times, read distinct keys, are concurrent with one another (a scan takes no
	// snapshot across keys, so no order among its keys is promised), and are ordered with the
	// process's other ops as one op is — after the op before the group, before the op after
	// it. Group IDs are unique in a history; 0 is an ordinary op.
	Group int
}

func (o Op) String() string {
	var res string
	switch {
	case o.Kind == Write:
		res = fmt.Sprintf("write %s=%q", o.Key, o.Value)
	case o.Found:
		res = fmt.Sprintf("read %s -> %q", o.Key, o.Value)
	default:
		res = fmt.Sprintf("read %s -> absent", o.Key)
	}
	v := ""
	if !o.Version.IsZero() {
		v = " v=" + o.Version.String()
	}
	if o.Group != 0 {
		res = fmt.Sprintf("scan#%d %s", o.Group, res)
	}
	ret := fmt.Sprintf("%.3fms", float64(o.Return)/1e6)
	if o.Outcome == Indeterminate {
		ret = "?"
	}
	return fmt.Sprintf("op#%d p%d %s%s [%s] at %.3fms..%s via %s", o.ID, o.Process, res, v, o.Outcome, float64(o.Invoke)/1e6, ret, o.Node)
}

// History is every operation of a run, in invocation order.
type History []Op

// Violation explains a failed check with the operations involved, minimal where possible.
type Violation struct {
	Checker string
	Reason  string
	Ops     []Op
	// definitive: the violation does not depend on the order chosen for the operations
	// (a value nobody wrote, a version that changed between reads, ...).
	definitive bool
}

func (v *Violation) Error() string {
	s := fmt.Sprintf("%s: %s", v.Checker, v.Reason)
	for _, op := range v.Ops {
		s += "\n    " + op.String()
	}
	return s
}

// ReplicaState is one replica's newest version of one key after quiescence.
type ReplicaState struct {
	Node    string
	Key     string
	Found   bool
	Value   string
	Version hlc.Version
}
