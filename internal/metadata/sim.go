package metadata

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/storage"
)

// The simulator's workload for the metadata group: clients create, alter, drop and describe
// (a linearizable read of the record) a few keyspaces, with conditional changes based on
// the versions they last saw, so that changes race. The history is checked for
// linearizability per keyspace name with Porcupine against the catalog's specification
// (metaModel), and every node's final records must agree.

var simNames = []string{"alpha", "beta", "gamma"}

type simOp struct {
	proc    int
	kind    string // create, alter, drop, describe
	name    string
	tag     string // the option value a create or alter sets
	expect  uint64
	invoke  time.Duration
	ret     time.Duration
	outcome engine.SimOutcome
	// Output of an OK op.
	errKind errs.Kind
	version uint64
	found   bool
	outTag  string
}

type simClient struct {
	proc int
	seq  int
	seen map[string]uint64 // last version seen per name
}

type simWorkload struct {
	clients map[int]*simClient
	procs   int
	ops     []simOp
	reqs    map[uint64]int // request ID → index in ops
}

func newSimWorkload() engine.SimWorkload {
	return &simWorkload{clients: map[int]*simClient{}, reqs: map[uint64]int{}}
}

func (w *simWorkload) client(c int) *simClient {
	cl := w.clients[c]
	if cl == nil {
		cl = &simClient{proc: w.procs, seen: map[string]uint64{}}
		w.procs++
		w.clients[c] = cl
	}
	return cl
}

// simTagOption is the option a create or alter sets, to a value unique to the change.
const simTagOption = "speculative_retry"

func (w *simWorkload) Next(rng *rand.Rand, keyspace string, c int) engine.Request {
	cl := w.client(c)
	cl.seq++
	name := simNames[rng.IntN(len(simNames))]
	// A canonical duration, as option normalisation writes it back.
	tag := (time.Duration(c*100000+cl.seq) * time.Millisecond).String()
	expect := cl.seen[name]
	if rng.IntN(5) == 0 {
		expect = 0 // unconditional
	}
	var cmd Command
	switch r := rng.Float64(); {
	case r < 0.35:
		return engine.Request{Op: engine.OpGet, Keyspace: keyspace, Key: KeyspaceKey(name), Level: config.LevelLinearizable}
	case r < 0.6:
		cmd = Command{Op: OpCreate, Spec: &config.Keyspace{Name: name, Protocol: config.ProtocolQuorum, Partitions: 4, Options: map[string]string{simTagOption: tag}}}
	case r < 0.88:
		cmd = Command{Op: OpAlter, Name: name, ExpectVersion: expect, SetOptions: map[string]string{simTagOption: tag}}
	default:
		cmd = Command{Op: OpDrop, Name: name, ExpectVersion: expect}
	}
	return engine.Request{Op: engine.OpCommand, Keyspace: keyspace, Command: cmd.Encode()}
}

func (w *simWorkload) Describe(req engine.Request) string {
	if req.Op == engine.OpGet {
		return "describe " + string(req.Key)
	}
	c, err := DecodeCommand(req.Command)
	if err != nil {
		return "bad command"
	}
	switch c.Op {
	case OpCreate:
		return fmt.Sprintf("create %s %s=%s", c.Spec.Name, simTagOption, c.Spec.Options[simTagOption])
	case OpAlter:
		return fmt.Sprintf("alter %s expect=%d %s=%s", c.Name, c.ExpectVersion, simTagOption, c.SetOptions[simTagOption])
	}
	return fmt.Sprintf("%s %s expect=%d", c.Op, c.Name, c.ExpectVersion)
}

func (w *simWorkload) Done(c int, req engine.Request, res engine.Result, outcome engine.SimOutcome, invoke, ret time.Duration) {
	cl := w.client(c)
	op := simOp{proc: cl.proc, invoke: invoke, ret: ret, outcome: outcome}
	if req.Op == engine.OpGet {
		op.kind = "describe"
		op.name, _ = IsKeyspaceKey(req.Key)
	} else {
		cmd, _ := DecodeCommand(req.Command)
		op.kind = cmd.Op
		op.expect = cmd.ExpectVersion
		switch cmd.Op {
		case OpCreate:
			op.name, op.tag = cmd.Spec.Name, cmd.Spec.Options[simTagOption]
		case OpAlter:
			op.name, op.tag = cmd.Name, cmd.SetOptions[simTagOption]
		default:
			op.name = cmd.Name
		}
	}
	if outcome == engine.SimOK {
		switch {
		case res.Err != nil:
			op.errKind = errs.KindOf(res.Err)
		case req.Op == engine.OpGet:
			if res.Found {
				if rec, err := DecodeKeyspace(res.Value); err == nil {
					op.found, op.version, op.outTag = true, rec.Version, rec.Spec.Options[simTagOption]
				}
			}
		default:
			if o, err := DecodeOutcome(res.Output); err == nil {
				op.version = o.Version
			}
		}
		if op.errKind == 0 && op.version != 0 {
			cl.seen[op.name] = op.version
		}
		if op.errKind == 0 && op.kind == OpDrop {
			delete(cl.seen, op.name)
		}
	}
	if outcome == engine.SimIndeterminate {
		// The client goes on as a new process: the old one may still be "executing" it.
		cl.proc = w.procs
		w.procs++
	}
	w.ops = append(w.ops, op)
}

// metaState is one keyspace name in the model: whether it exists, its tag, and its
// version (0: unknown, after a change whose result was never seen).
type metaState struct {
	exists  bool
	tag     string
	version uint64
}

type metaInput struct {
	kind   string
	tag    string
	expect uint64
}

type metaOutput struct {
	unknown bool // indeterminate: no output
	errKind errs.Kind
	version uint64
	found   bool
	tag     string
}

// metaModel is the catalog's specification for one keyspace name, nondeterministic for
// changes whose outcome is unknown (they may or may not have happened).
var metaModel = (&porcupine.NondeterministicModel{
	Init: func() []any { return []any{metaState{}} },
	Step: func(state, input, output any) []any {
		st, in, out := state.(metaState), input.(metaInput), output.(metaOutput)
		// applied is the state after the change, if it can succeed (ok false: it cannot).
		applied, ok := st, false
		switch in.kind {
		case OpCreate:
			if !st.exists {
				applied, ok = metaState{exists: true, tag: in.tag, version: out.version}, true
			}
		case OpAlter:
			if st.exists && (in.expect == 0 || st.version == 0 || in.expect == st.version) {
				applied, ok = metaState{exists: true, tag: in.tag, version: out.version}, true
			}
		case OpDrop:
			if st.exists && (in.expect == 0 || st.version == 0 || in.expect == st.version) {
				applied, ok = metaState{}, true
			}
		case "describe":
			if out.unknown {
				return []any{st}
			}
			if out.found != st.exists || (st.exists && (out.tag != st.tag || (st.version != 0 && out.version != st.version))) {
				return nil
			}
			if st.exists && st.version == 0 {
				st.version = out.version // now known
			}
			return []any{st}
		}
		if out.unknown {
			if ok {
				applied.version = 0
				return []any{st, applied}
			}
			return []any{st}
		}
		if out.errKind == 0 {
			if !ok {
				return nil
			}
			if in.kind != OpDrop && out.version == 0 {
				return nil
			}
			return []any{applied}
		}
		// An error: the state must explain it.
		switch out.errKind {
		case errs.AlreadyExists:
			if in.kind == OpCreate && st.exists {
				return []any{st}
			}
		case errs.NotFound:
			if !st.exists {
				return []any{st}
			}
		case errs.Conflict:
			if st.exists && in.expect != 0 && (st.version == 0 || in.expect != st.version) {
				return []any{st}
			}
		default:
			return []any{st} // refused before anything was done (invalid, unavailable)
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(metaInput), output.(metaOutput)
		res := "?"
		switch {
		case out.unknown:
		case out.errKind != 0:
			res = out.errKind.String()
		case in.kind == "describe" && !out.found:
			res = "absent"
		case in.kind == "describe":
			res = fmt.Sprintf("%s@%d", out.tag, out.version)
		default:
			res = fmt.Sprintf("ok@%d", out.version)
		}
		return fmt.Sprintf("%s tag=%s expect=%d -> %s", in.kind, in.tag, in.expect, res)
	},
}).ToModel()

func (w *simWorkload) Check(final map[string][]storage.Record) []string {
	var violations []string
	byName := map[string][]porcupine.Operation{}
	for _, op := range w.ops {
		if op.outcome == engine.SimFailed || (op.kind == "describe" && op.outcome != engine.SimOK) {
			continue
		}
		in := metaInput{kind: op.kind, tag: op.tag, expect: op.expect}
		out := metaOutput{errKind: op.errKind, version: op.version, found: op.found, tag: op.outTag}
		ret := int64(op.ret)
		if op.outcome == engine.SimIndeterminate {
			out = metaOutput{unknown: true}
			ret = math.MaxInt64
		}
		byName[op.name] = append(byName[op.name], porcupine.Operation{ClientId: op.proc, Input: in, Output: out, Call: int64(op.invoke), Return: ret})
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range byName {
			if !yield(n) {
				return
			}
		}
	}) {
		res, info := porcupine.CheckOperationsVerbose(metaModel, byName[name], 10*time.Second)
		switch res {
		case porcupine.Illegal:
			violations = append(violations, fmt.Sprintf("linearizability: the changes and descriptions of keyspace %q have no legal order: %s\n%s", name, describePartial(info), describeOps(byName[name])))
		case porcupine.Unknown:
			violations = append(violations, fmt.Sprintf("linearizability: the check of keyspace %q timed out (%d operations)", name, len(byName[name])))
		}
	}
	// Every node holds the whole catalog (voters and learners): the final records agree.
	var ref string
	var refNode string
	for _, node := range slices.Sorted(func(yield func(string) bool) {
		for n := range final {
			if !yield(n) {
				return
			}
		}
	}) {
		var b strings.Builder
		for _, r := range final[node] {
			if r.Tombstone {
				continue
			}
			fmt.Fprintf(&b, "%s=%s;", r.Key, r.Value)
		}
		if refNode == "" {
			ref, refNode = b.String(), node
			continue
		}
		if b.String() != ref {
			violations = append(violations, fmt.Sprintf("convergence: nodes %s and %s hold different catalogs after quiescence", refNode, node))
			break
		}
	}
	return violations
}

// describePartial summarises Porcupine's longest partial linearization.
func describePartial(info porcupine.LinearizationInfo) string {
	parts := info.PartialLinearizations()
	if len(parts) == 0 || len(parts[0]) == 0 {
		return "no operation could be linearized first"
	}
	return fmt.Sprintf("%d operations linearize, then none can follow", len(parts[0][0]))
}

// describeOps lists one keyspace's operations for a failure report (at most 60, the last
// ones: a violation shows near the end of a partial linearization).
func describeOps(ops []porcupine.Operation) string {
	var b strings.Builder
	from := max(0, len(ops)-60)
	if from > 0 {
		fmt.Fprintf(&b, "    ... %d earlier operations\n", from)
	}
	for _, op := range ops[from:] {
		ret := "?"
		if op.Return != math.MaxInt64 {
			ret = fmt.Sprintf("%.3fms", float64(op.Return)/1e6)
		}
		fmt.Fprintf(&b, "    p%d [%.3fms, %s] %s\n", op.ClientId, float64(op.Call)/1e6, ret, metaModel.DescribeOperation(op.Input, op.Output))
	}
	return strings.TrimRight(b.String(), "\n")
}
