package check

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file is the transactional checker: serializability (and, as an option, strict
// serializability) of a history of multi-key transactions, after Elle (Kingsbury & Alvaro,
// "Elle: Inferring Isolation Anomalies from Experimental Observations", VLDB 2020).
//
// Elle does not search for a serial order — that is NP-complete in general. It infers the
// dependencies between transactions that any serial order must respect (Adya's ww, wr and rw
// edges) from what the reads returned, and reports a cycle of them: a cycle is a proof that
// no serial order exists, and the kinds of its edges say how weak the isolation was. For that
// inference to be possible, every write must be recoverable from the reads: values are
// unique per key, and with list-append keys every read returns the whole order of appends
// so far, from which the version order is read off directly. Registers reveal far less
// (only where a transaction read a value and then overwrote it), so fewer anomalies can be
// proven there. The graph machinery is in txn_graph.go.

// Checker names for transactional checks (Anomaly itself carries no checker name; callers
// that turn anomalies into a Violation use these).
const (
	CheckerSerializable       = "serializability"
	CheckerStrictSerializable = "strict-serializability"
)

// TxnOutcome is what the client learned about a transaction.
type TxnOutcome uint8

const (
	// TxnOK: committed, and the client was told so; its reads are what it observed.
	TxnOK TxnOutcome = iota + 1
	// TxnAborted: certainly did not take effect; none of its reads or writes count, and a
	// committed transaction that observed one of its writes read aborted state (G1a).
	TxnAborted
	// TxnIndeterminate: timed out or lost; it may or may not have committed. Its writes count
	// when some committed read observed them (then it committed); otherwise it is dropped.
	// Its reads never count: the client never learned what they returned.
	TxnIndeterminate
)

func (o TxnOutcome) String() string {
	switch o {
	case TxnOK:
		return "ok"
	case TxnAborted:
		return "aborted"
	case TxnIndeterminate:
		return "indeterminate"
	}
	return "invalid-outcome"
}

// MopKind is the type of one micro-operation of a transaction.
type MopKind uint8

const (
	// MopRead reads a key: a list (list-append histories) or a register.
	MopRead MopKind = iota + 1
	// MopAppend appends Value to a list key.
	MopAppend
	// MopWrite sets a register key to Value.
	MopWrite
)

func (k MopKind) String() string {
	switch k {
	case MopRead:
		return "read"
	case MopAppend:
		return "append"
	case MopWrite:
		return "write"
	}
	return "invalid-mop"
}

// Mop is one micro-operation of a transaction.
type Mop struct {
	Kind MopKind
	Key  string
	// Value appended (MopAppend) or written (MopWrite); unique per key across the history, so
	// that a read identifies the write it saw.
	Value int64
	// List is what a MopRead of a list key observed, oldest first (nil: empty or absent).
	List []int64
	// ReadValue and ReadFound are what a MopRead of a register key observed (ReadFound false:
	// the key was absent).
	ReadValue int64
	ReadFound bool
}

// Txn is one transaction. Times are virtual (the simulator's) nanoseconds; Return is
// meaningless when Outcome is TxnIndeterminate.
type Txn struct {
	ID             int // unique in the history
	Process        int
	Invoke, Return int64
	Outcome        TxnOutcome
	Ops            []Mop
}

// TxnHistory is every transaction of a run.
type TxnHistory struct {
	Txns []Txn
	// Registers: false means every key is a list that MopAppend extends; true means every key
	// is a register that MopWrite overwrites. One history holds one kind.
	Registers bool
}

// Anomaly is one way a transactional history fails. Kinds, most basic first:
//
//   - "malformed": the history breaks the checker's preconditions (duplicate IDs, a value
//     appended or written twice to one key, a mop of the wrong kind). It is the recorder's
//     bug, not the store's, and no other check runs.
//   - "duplicate-append": a read saw one appended value twice: an append took effect twice.
//   - "incompatible-order": two reads of a list key are not both prefixes of one order of
//     appends.
//   - "internal": a transaction's read disagrees with its own earlier reads and writes.
//   - "unknown-value": a read saw a value that no transaction appended or wrote to that key.
//   - "G1a" (aborted read): a committed transaction read a value an aborted one wrote.
//   - "G1b" (intermediate read): a read saw a value its writer later overwrote (registers)
//     or appended after (lists) in the same transaction — state that never committed.
//   - Dependency cycles (Adya): "G0" (ww edges only), "G1c" (ww and wr edges, at least one
//     wr), "G-single" (exactly one rw edge), "G2" (two or more rw edges), and, from
//     CheckStrictSerializable only, "G-realtime" (a cycle that needs real-time order).
type Anomaly struct {
	Kind string
	// Txns are the IDs involved: for a cycle, its transactions in cycle order.
	Txns []int
	// Explanation is meant for a person: for a cycle, a header line and then one line per
	// edge naming the key and values it was inferred from, e.g.
	// "T3 -ww(x)-> T5: T3 appended 4 to x before T5 appended 7".
	Explanation string
}

func (a Anomaly) String() string {
	return a.Kind + ": " + a.Explanation
}

// Anomaly kinds; the order of anomalyOrder is the order of the report.
const (
	anomalyMalformed    = "malformed"
	anomalyDuplicate    = "duplicate-append"
	anomalyIncompatible = "incompatible-order"
	anomalyInternal     = "internal"
	anomalyUnknownValue = "unknown-value"
	anomalyG1a          = "G1a"
	anomalyG1b          = "G1b"
	anomalyG0           = "G0"
	anomalyG1c          = "G1c"
	anomalyGSingle      = "G-single"
	anomalyG2           = "G2"
	anomalyGRealtime    = "G-realtime"
)

var anomalyOrder = []string{
	anomalyMalformed, anomalyDuplicate, anomalyIncompatible, anomalyInternal, anomalyUnknownValue,
	anomalyG1a, anomalyG1b, anomalyG0, anomalyG1c, anomalyGSingle, anomalyG2, anomalyGRealtime,
}

func anomalyRank(kind string) int {
	if i := slices.Index(anomalyOrder, kind); i >= 0 {
		return i
	}
	return len(anomalyOrder)
}

// maxTxnAnomalies bounds the report: past a handful, more anomalies add noise, not insight,
// and explaining them costs time.
const maxTxnAnomalies = 8

// CheckSerializable reports whether the history is serializable: whether some serial order
// of the committed transactions (and of the indeterminate ones whose writes were observed)
// explains every read. It infers the dependencies any such order must respect and reports
// their cycles (Elle, sections 4–5); real time plays no part. The result is Illegal with at
// most 8 anomalies, most basic first (see Anomaly); Ok when there are none; Unknown when the
// check ran out of time (timeout ≤ 0: unbounded) before it could decide.
//
// It is sound: every anomaly it reports is a real violation. For list-append histories it is
// also complete: the reads reveal each key's version order as far as any serial order
// depends on it, so when no anomaly is found any topological order of the dependency graph
// is a serial order that explains the history (the tests check both directions against
// exhaustive search on small histories). Registers reveal much less — the version order is
// known only where a transaction read a value and then overwrote it — so a register history
// that is not serializable can pass.
func CheckSerializable(h TxnHistory, timeout time.Duration) (Result, []Anomaly) {
	return checkTxns(&h, timeout, false)
}

// CheckStrictSerializable is CheckSerializable plus real-time order: a transaction that
// returned (committed, client told) before another was invoked must precede it in the
// serial order. Cycles that need such an edge are reported as "G-realtime", and only in
// strongly connected components where no serializability cycle was reported, so that the
// more basic anomaly is not drowned by real-time ones.
func CheckStrictSerializable(h TxnHistory, timeout time.Duration) (Result, []Anomaly) {
	return checkTxns(&h, timeout, true)
}

// txnKV names a value of a key.
type txnKV struct {
	key   string
	value int64
}

// txnWriter is the transaction and mop that appended or wrote a value.
type txnWriter struct {
	txn, mop int32
	// final: the transaction's last append or write to the key. For a register that is the
	// version the transaction installed; for a list, the element after which the
	// transaction's appends to the key are complete. Reading anything else from another
	// transaction is reading uncommitted, intermediate state (G1b).
	final bool
}

// txnRead is a read of a committed transaction.
type txnRead struct {
	txn, mop int32
	// external: the read precedes the transaction's own writes to its key, so it observed
	// other transactions' state and implies dependencies. A later read sees the
	// transaction's own writes; it only has to agree with them ("internal").
	external bool
}

type txnChecker struct {
	h        *TxnHistory
	budget   *txnBudget
	realtime bool
	// writers: every append or write of a non-aborted transaction, by key and value.
	writers map[txnKV]txnWriter
	// appendersOf: per list key, each non-aborted transaction's last append to it.
	appendersOf map[string][]txnWriter
	// abortedWriters: aborted transactions' appends and writes, for naming the source of a
	// G1a read. A value some non-aborted transaction also wrote is attributed to that one.
	abortedWriters map[txnKV]txnWriter
	// included: the transaction is a node of the dependency graph — committed, or
	// indeterminate with a write some committed read observed.
	included []bool
	reads    []txnRead // every read of a committed transaction, in history order
	found    []Anomaly // anomalies other than cycles
	perKind  map[string]int
	g        *txnGraph
}

func checkTxns(h *TxnHistory, timeout time.Duration, realtime bool) (Result, []Anomaly) {
	c := &txnChecker{h: h, budget: newTxnBudget(timeout), realtime: realtime, perKind: map[string]int{}}
	if !c.index() {
		// Every inference below relies on the preconditions; blaming the store for the
		// recorder's mistake would send someone hunting for the wrong bug.
		return Illegal, c.report(nil)
	}
	c.observe()
	c.g = newTxnGraph(len(h.Txns))
	if h.Registers {
		c.registerEdges()
	} else {
		c.listEdges()
	}
	if realtime {
		c.realtimeEdges()
	}
	if c.budget.expired {
		return c.verdict(nil)
	}
	c.g.finish()
	return c.verdict(c.cycles())
}

// verdict combines the non-cycle anomalies with the cycles. Any anomaly is a proof, so it
// makes the history Illegal even when time ran out before the rest was examined.
func (c *txnChecker) verdict(cycles []txnCycle) (Result, []Anomaly) {
	out := c.report(cycles)
	switch {
	case len(out) > 0:
		return Illegal, out
	case c.budget.expired:
		return Unknown, nil
	}
	return Ok, nil
}

// report orders the anomalies most basic first and explains the cycles that make the cut
// (explaining a cycle costs string building; only the reported ones are worth it).
func (c *txnChecker) report(cycles []txnCycle) []Anomaly {
	out := slices.Clone(c.found)
	slices.SortStableFunc(out, func(a, b Anomaly) int { return anomalyRank(a.Kind) - anomalyRank(b.Kind) })
	slices.SortStableFunc(cycles, func(a, b txnCycle) int { return anomalyRank(a.kind) - anomalyRank(b.kind) })
	for _, cyc := range cycles {
		if len(out) >= maxTxnAnomalies {
			break
		}
		out = append(out, c.explainCycle(cyc))
	}
	if len(out) > maxTxnAnomalies {
		out = out[:maxTxnAnomalies]
	}
	return out
}

// add records a non-cycle anomaly; past maxTxnAnomalies of one kind, more of it could never
// be reported, so they are not kept.
func (c *txnChecker) add(kind string, txns []int32, format string, args ...any) {
	if c.perKind[kind] >= maxTxnAnomalies {
		return
	}
	c.perKind[kind]++
	ids := make([]int, 0, len(txns))
	for _, t := range txns {
		if t >= 0 {
			ids = append(ids, c.h.Txns[t].ID)
		}
	}
	c.found = append(c.found, Anomaly{Kind: kind, Txns: ids, Explanation: fmt.Sprintf(format, args...)})
}

// name is how explanations refer to a transaction.
func (c *txnChecker) name(t int32) string { return "T" + strconv.Itoa(c.h.Txns[t].ID) }

func (c *txnChecker) mop(t, m int32) *Mop { return &c.h.Txns[t].Ops[m] }

// writeVerb is how explanations describe a write in this history.
func (c *txnChecker) writeVerb() string {
	if c.h.Registers {
		return "wrote"
	}
	return "appended"
}

// index checks the preconditions and indexes the writes. It reports false when the history
// is malformed.
func (c *txnChecker) index() bool {
	h := c.h
	ids := make(map[int]int, len(h.Txns))
	for i := range h.Txns {
		t := &h.Txns[i]
		if j, dup := ids[t.ID]; dup {
			c.add(anomalyMalformed, []int32{int32(j), int32(i)}, "two transactions (positions %d and %d) share the ID T%d", j, i, t.ID)
		}
		ids[t.ID] = i
		if t.Outcome < TxnOK || t.Outcome > TxnIndeterminate {
			c.add(anomalyMalformed, []int32{int32(i)}, "T%d has unknown outcome %d", t.ID, t.Outcome)
		}
		for j := range t.Ops {
			m := &t.Ops[j]
			if m.Kind == MopRead || (m.Kind == MopAppend && !h.Registers) || (m.Kind == MopWrite && h.Registers) {
				continue
			}
			what := "list-append"
			if h.Registers {
				what = "register"
			}
			c.add(anomalyMalformed, []int32{int32(i)}, "T%d's mop %d is a %s of %s, which a %s history cannot hold", t.ID, j, m.Kind, m.Key, what)
		}
	}
	// Values must identify their writes. Non-aborted writes first, so that a value an aborted
	// transaction also used is attributed to the one that may have committed.
	c.writers = make(map[txnKV]txnWriter)
	c.abortedWriters = make(map[txnKV]txnWriter)
	for _, aborted := range []bool{false, true} {
		for i := range h.Txns {
			t := &h.Txns[i]
			if (t.Outcome == TxnAborted) != aborted {
				continue
			}
			for j := range t.Ops {
				m := &t.Ops[j]
				if m.Kind != MopAppend && m.Kind != MopWrite {
					continue
				}
				kv := txnKV{m.Key, m.Value}
				w := txnWriter{txn: int32(i), mop: int32(j)}
				if aborted {
					if _, taken := c.writers[kv]; !taken {
						if _, taken := c.abortedWriters[kv]; !taken {
							c.abortedWriters[kv] = w
						}
					}
					continue
				}
				if prev, dup := c.writers[kv]; dup {
					c.add(anomalyMalformed, []int32{prev.txn, int32(i)},
						"%s and %s both %s %d to %s: values must be unique per key, or a read cannot tell whose write it saw",
						c.name(prev.txn), c.name(int32(i)), c.writeVerb(), m.Value, m.Key)
					continue
				}
				c.writers[kv] = w
			}
		}
	}
	// Mark each transaction's last write to each key; list the appends of each key.
	c.appendersOf = make(map[string][]txnWriter)
	last := map[string]bool{}
	for i := range h.Txns {
		t := &h.Txns[i]
		if t.Outcome == TxnAborted {
			continue
		}
		clear(last)
		for j := len(t.Ops) - 1; j >= 0; j-- {
			m := &t.Ops[j]
			if m.Kind == MopRead || last[m.Key] {
				continue
			}
			last[m.Key] = true
			kv := txnKV{m.Key, m.Value}
			if w, ok := c.writers[kv]; ok && w.txn == int32(i) && w.mop == int32(j) {
				w.final = true
				c.writers[kv] = w
				if m.Kind == MopAppend {
					// Only the final append: the edges it gets are implied for the earlier ones.
					c.appendersOf[m.Key] = append(c.appendersOf[m.Key], w)
				}
			}
		}
	}
	return c.perKind[anomalyMalformed] == 0
}

// observe walks every committed transaction's reads: it checks each against the
// transaction's own writes (internal consistency), checks what each read observed (G1a, G1b,
// unknown values), and marks the indeterminate transactions whose writes were observed —
// they committed, so they join the graph.
func (c *txnChecker) observe() {
	h := c.h
	c.included = make([]bool, len(h.Txns))
	lists := map[string]*txnListState{}
	regs := map[string]*txnRegState{}
	for i := range h.Txns {
		if h.Txns[i].Outcome != TxnOK {
			continue
		}
		c.included[i] = true
		if !c.budget.ok() {
			return
		}
		if h.Registers {
			clear(regs)
			c.observeRegisterTxn(int32(i), regs)
		} else {
			clear(lists)
			c.observeListTxn(int32(i), lists)
		}
	}
}

// txnListState is what a transaction knows of a list key from its own mops.
type txnListState struct {
	// known: a read fixed the whole list; it must now be base followed by own. Otherwise
	// only its tail is known: own.
	known    bool
	base     []int64 // the last read (not copied: reads are never modified)
	own      []int64 // the transaction's appends since that read (or since it began)
	appended bool    // the transaction has appended to the key
}

func (s *txnListState) matches(list []int64) bool {
	if s.known {
		n := len(s.base)
		return len(list) == n+len(s.own) && slices.Equal(list[:n], s.base) && slices.Equal(list[n:], s.own)
	}
	return len(list) >= len(s.own) && slices.Equal(list[len(list)-len(s.own):], s.own)
}

func (c *txnChecker) observeListTxn(i int32, state map[string]*txnListState) {
	t := &c.h.Txns[i]
	for j := range t.Ops {
		m := &t.Ops[j]
		st := state[m.Key]
		if st == nil {
			st = &txnListState{}
			state[m.Key] = st
		}
		if m.Kind == MopAppend {
			st.own = append(st.own, m.Value)
			st.appended = true
			continue
		}
		if st.matches(m.List) {
			c.reads = append(c.reads, txnRead{txn: i, mop: int32(j), external: !st.appended})
		} else {
			// A transaction is isolated from itself only if it sees exactly its own past. The
			// read is then no evidence of the version order either: using it would only add a
			// derived incompatible-order report to this one.
			if st.known {
				c.add(anomalyInternal, []int32{i}, "%s read %s=%s, but its earlier read of %s and its own appends since say it must be %s",
					c.name(i), m.Key, fmtTxnList(m.List), m.Key, fmtTxnList(slices.Concat(st.base, st.own)))
			} else {
				c.add(anomalyInternal, []int32{i}, "%s appended %s to %s, then read %s=%s, which does not end with those appends",
					c.name(i), fmtTxnValues(st.own), m.Key, m.Key, fmtTxnList(m.List))
			}
		}
		st.known, st.base, st.own = true, m.List, nil
		c.checkObserved(i, int32(j), m.List)
	}
}

// checkObserved checks the values one read observed (a list, or one register value): who
// wrote them, and whether the reader could have seen them.
func (c *txnChecker) checkObserved(i, j int32, values []int64) {
	m := c.mop(i, j)
	reported := false // one report per read: the first problem explains it
	for k, v := range values {
		kv := txnKV{m.Key, v}
		w, ok := c.writers[kv]
		switch {
		case reported && ok:
		case !ok && reported:
			continue
		case !ok:
			if a, aborted := c.abortedWriters[kv]; aborted {
				includes := ""
				if !c.h.Registers {
					includes = fmt.Sprintf(", which includes %d,", v)
				}
				c.add(anomalyG1a, []int32{i, a.txn}, "%s read %s=%s%s but %s, which %s it, aborted",
					c.name(i), m.Key, c.fmtRead(m), includes, c.name(a.txn), c.writeVerb())
			} else {
				c.add(anomalyUnknownValue, []int32{i}, "%s read %s=%s, but no transaction %s %d to %s",
					c.name(i), m.Key, c.fmtRead(m), c.writeVerb(), v, m.Key)
			}
			reported = true
			continue
		case w.txn == i && w.mop > j:
			c.add(anomalyInternal, []int32{i}, "%s read %s=%s, which includes %d, before it %s %d itself",
				c.name(i), m.Key, c.fmtRead(m), v, c.writeVerb(), v)
			reported = true
		case w.txn != i && k == len(values)-1 && !w.final:
			// Only the last element matters for lists: a read that also saw the writer's
			// later appends saw its final state.
			c.add(anomalyG1b, []int32{i, w.txn}, "%s read %s=%s, but %s %s %d to %s and then %s %d to it in the same transaction: an intermediate state that never committed",
				c.name(i), m.Key, c.fmtRead(m), c.name(w.txn), c.writeVerb(), v, m.Key, c.writeVerb(), c.nextWrite(w))
			reported = true
		}
		if c.h.Txns[w.txn].Outcome == TxnIndeterminate {
			c.included[w.txn] = true // observed: it committed
		}
	}
}

// nextWrite is the value the writer's transaction wrote to the same key after w.
func (c *txnChecker) nextWrite(w txnWriter) int64 {
	t := &c.h.Txns[w.txn]
	key := t.Ops[w.mop].Key
	for j := int(w.mop) + 1; j < len(t.Ops); j++ {
		if t.Ops[j].Kind != MopRead && t.Ops[j].Key == key {
			return t.Ops[j].Value
		}
	}
	return 0
}

// txnRegState is what a transaction knows of a register key from its own mops.
type txnRegState struct {
	known, found bool
	value        int64
	wrote        bool
}

func (c *txnChecker) observeRegisterTxn(i int32, state map[string]*txnRegState) {
	t := &c.h.Txns[i]
	for j := range t.Ops {
		m := &t.Ops[j]
		st := state[m.Key]
		if st == nil {
			st = &txnRegState{}
			state[m.Key] = st
		}
		if m.Kind == MopWrite {
			*st = txnRegState{known: true, found: true, value: m.Value, wrote: true}
			continue
		}
		if !st.known || (st.found == m.ReadFound && (!m.ReadFound || st.value == m.ReadValue)) {
			c.reads = append(c.reads, txnRead{txn: i, mop: int32(j), external: !st.wrote})
		} else {
			what := "read"
			if st.wrote {
				what = "written"
			}
			c.add(anomalyInternal, []int32{i}, "%s read %s=%s, but it had just %s %s=%s",
				c.name(i), m.Key, fmtTxnReg(m.ReadFound, m.ReadValue), what, m.Key, fmtTxnReg(st.found, st.value))
		}
		st.known, st.found, st.value = true, m.ReadFound, m.ReadValue
		if m.ReadFound {
			c.checkObserved(i, int32(j), []int64{m.ReadValue})
		}
	}
}

// fmtRead renders what a read observed.
func (c *txnChecker) fmtRead(m *Mop) string {
	if c.h.Registers {
		return fmtTxnReg(m.ReadFound, m.ReadValue)
	}
	return fmtTxnList(m.List)
}

func fmtTxnReg(found bool, v int64) string {
	if !found {
		return "absent"
	}
	return strconv.FormatInt(v, 10)
}

// fmtTxnList renders a list read, eliding the middle of a long one: the explanations turn
// on its last elements.
func fmtTxnList(l []int64) string {
	const head, tail = 2, 5
	if len(l) <= head+tail+1 {
		return fmtTxnValues(l)
	}
	first, last := fmtTxnValues(l[:head]), fmtTxnValues(l[len(l)-tail:])
	return fmt.Sprintf("%s … %s (%d elements)", first[:len(first)-1], last[1:], len(l))
}

func fmtTxnValues(l []int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, v := range l {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatInt(v, 10))
	}
	b.WriteByte(']')
	return b.String()
}

// listEdges infers the dependencies of a list-append history (Elle section 4). Each read
// returns a prefix of its key's one version order — the order in which the appends took
// effect — so the longest read is that order as far as anyone observed it, and every other
// read must be a prefix of it. From the order:
//   - ww: the appender of element i precedes the appender of element i+1;
//   - wr: the appender of a read's last element precedes the reader;
//   - rw: a reader that saw the prefix ending at element i precedes the appender of element
//     i+1 (a reader of the empty list precedes the appender of element 0): it did not see it;
//     and every reader precedes a committed appender whose element nobody read, which
//     also follows the appender of the last element read (unseenAppendEdges).
//
// A key whose reads disagree, or whose order holds a value twice, has no version order; it
// keeps only its wr edges, which need none.
func (c *txnChecker) listEdges() {
	byKey := map[string][]int32{}
	for r := range c.reads {
		m := c.mop(c.reads[r].txn, c.reads[r].mop)
		byKey[m.Key] = append(byKey[m.Key], int32(r))
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		if c.budget.expired {
			return
		}
		rs := byKey[key]
		longest := rs[0]
		for _, r := range rs {
			if len(c.readList(r)) > len(c.readList(longest)) {
				longest = r
			}
		}
		order := c.readList(longest)
		ordered := c.checkVersionOrder(key, rs, longest)
		for _, ri := range rs {
			r := c.reads[ri]
			if !r.external {
				continue
			}
			list := c.readList(ri)
			if len(list) > 0 {
				last := list[len(list)-1]
				if w, ok := c.writers[txnKV{key, last}]; ok && c.included[w.txn] {
					c.g.add(txnEdge{from: w.txn, to: r.txn, kind: edgeWR, basis: basisListRead, key: key, v1: last, readTxn: r.txn, readMop: r.mop}, c.budget)
				}
			}
			if ordered && len(list) < len(order) {
				next := order[len(list)]
				if w, ok := c.writers[txnKV{key, next}]; ok && c.included[w.txn] {
					c.g.add(txnEdge{from: r.txn, to: w.txn, kind: edgeRW, basis: basisListMissed, key: key, v2: next, readTxn: r.txn, readMop: r.mop}, c.budget)
				}
			}
		}
		if !ordered {
			continue
		}
		c.unseenAppendEdges(key, rs, order)
		for k := 0; k+1 < len(order); k++ {
			a, okA := c.writers[txnKV{key, order[k]}]
			b, okB := c.writers[txnKV{key, order[k+1]}]
			if okA && okB && c.included[a.txn] && c.included[b.txn] {
				c.g.add(txnEdge{from: a.txn, to: b.txn, kind: edgeWW, basis: basisListOrder, key: key, v1: order[k], v2: order[k+1]}, c.budget)
			}
		}
	}
}

// unseenAppendEdges adds what an append nobody read still implies. A committed transaction's
// append is in the key's final list, after everything anyone read (every read is a prefix of
// that list, and none holds it). So the appender of the last element read precedes it (ww),
// and every reader of the key missed it (rw from each external reader). Without these edges
// two transactions that each miss the other's unread append (write skew on lists nobody
// reads again) would pass. An indeterminate transaction counts once any of its writes was
// observed (it committed, so all of them took effect); otherwise its unread append is not
// known to have happened at all, and implies nothing.
func (c *txnChecker) unseenAppendEdges(key string, rs []int32, order []int64) {
	seen := make(map[int64]bool, len(order))
	for _, v := range order {
		seen[v] = true
	}
	for _, w := range c.appendersOf[key] {
		v := c.mop(w.txn, w.mop).Value
		if seen[v] || !c.included[w.txn] {
			continue
		}
		if len(order) > 0 {
			last := order[len(order)-1]
			if a, ok := c.writers[txnKV{key, last}]; ok && c.included[a.txn] {
				c.g.add(txnEdge{from: a.txn, to: w.txn, kind: edgeWW, basis: basisListUnseenOrder, key: key, v1: last, v2: v}, c.budget)
			}
		}
		for _, ri := range rs {
			if r := c.reads[ri]; r.external {
				c.g.add(txnEdge{from: r.txn, to: w.txn, kind: edgeRW, basis: basisListUnseen, key: key, v2: v, readTxn: r.txn, readMop: r.mop}, c.budget)
			}
		}
	}
}

func (c *txnChecker) readList(r int32) []int64 {
	return c.mop(c.reads[r].txn, c.reads[r].mop).List
}

// checkVersionOrder reports whether the longest read of key is a version order every read
// agrees with: no value twice, and every read a prefix of it.
func (c *txnChecker) checkVersionOrder(key string, rs []int32, longest int32) bool {
	order := c.readList(longest)
	lt := c.reads[longest].txn
	pos := make(map[int64]int, len(order))
	for k, v := range order {
		if first, dup := pos[v]; dup {
			c.add(anomalyDuplicate, []int32{lt}, "%s read %s=%s, which holds %d twice (at positions %d and %d): one append took effect more than once",
				c.name(lt), key, fmtTxnList(order), v, first, k)
			return false
		}
		pos[v] = k
	}
	for _, r := range rs {
		list := c.readList(r)
		k := 0
		for k < len(list) && list[k] == order[k] {
			c.budget.ok()
			k++
		}
		if k == len(list) {
			continue
		}
		rt := c.reads[r].txn
		c.add(anomalyIncompatible, []int32{lt, rt}, "%s read %s=%s but %s read %s=%s: they cannot both be prefixes of %s's one order of appends (position %d holds %d in one, %d in the other)",
			c.name(lt), key, fmtTxnList(order), c.name(rt), key, fmtTxnList(list), key, k, order[k], list[k])
		return false
	}
	return true
}

// registerEdges infers the dependencies of a read/write-register history. A register read
// shows one value, so the version order is known only in part:
//   - wr: the writer of a value precedes each transaction that read it;
//   - where a transaction read x=v1 and then wrote x=v2, v1 precedes v2 in x's version
//     order: ww from v1's writer to it, and rw from every other reader of v1 to it (they
//     saw a version it overwrote);
//   - a read of an absent key saw the initial state, which precedes every version: rw from
//     the reader to every writer of the key.
//
// Only the external reads (before the transaction's own writes to the key) say anything
// about other transactions, and only a transaction's last write to a key installs a version.
func (c *txnChecker) registerEdges() {
	readersOf := map[txnKV][]int32{}
	absentReaders := map[string][]int32{}
	for _, r := range c.reads {
		if !r.external {
			continue
		}
		m := c.mop(r.txn, r.mop)
		if !m.ReadFound {
			absentReaders[m.Key] = append(absentReaders[m.Key], r.txn)
			continue
		}
		kv := txnKV{m.Key, m.ReadValue}
		readersOf[kv] = append(readersOf[kv], r.txn)
		if w, ok := c.writers[kv]; ok && c.included[w.txn] {
			c.g.add(txnEdge{from: w.txn, to: r.txn, kind: edgeWR, basis: basisRegRead, key: m.Key, v1: m.ReadValue}, c.budget)
		}
	}
	// The versions each included transaction installed, by key, in history order.
	type installed struct {
		txn   int32
		value int64
	}
	finalWrite := map[txnKey]int64{}
	writersOf := map[string][]installed{}
	for kv, w := range c.writers {
		if w.final && c.included[w.txn] {
			finalWrite[txnKey{w.txn, kv.key}] = kv.value
			writersOf[kv.key] = append(writersOf[kv.key], installed{w.txn, kv.value})
		}
	}
	for _, ws := range writersOf {
		slices.SortFunc(ws, func(a, b installed) int { return int(a.txn) - int(b.txn) })
	}
	for _, r := range c.reads {
		if !r.external || c.budget.expired {
			continue
		}
		m := c.mop(r.txn, r.mop)
		v2, wrote := finalWrite[txnKey{r.txn, m.Key}]
		if !wrote || !m.ReadFound {
			continue // absent reads: below
		}
		kv := txnKV{m.Key, m.ReadValue}
		if w, ok := c.writers[kv]; ok && c.included[w.txn] {
			c.g.add(txnEdge{from: w.txn, to: r.txn, kind: edgeWW, basis: basisRegOverwrite, key: m.Key, v1: m.ReadValue, v2: v2}, c.budget)
		}
		for _, other := range readersOf[kv] {
			c.g.add(txnEdge{from: other, to: r.txn, kind: edgeRW, basis: basisRegMissed, key: m.Key, v1: m.ReadValue, v2: v2}, c.budget)
		}
	}
	for key, rs := range absentReaders {
		for _, reader := range rs {
			if c.budget.expired {
				return
			}
			for _, w := range writersOf[key] {
				c.g.add(txnEdge{from: reader, to: w.txn, kind: edgeRW, basis: basisRegMissed, key: key, absent: true, v2: w.value}, c.budget)
			}
		}
	}
}

// txnKey names a transaction's use of a key.
type txnKey struct {
	txn int32
	key string
}

// realtimeEdges adds, for strict serializability, T1 → T2 whenever T1 returned before T2
// was invoked. Not all of those pairs: only those not implied by others (Elle's transitive
// reduction). A sweep over invocations and returns in time order keeps the frontier — the
// transactions that returned and are not yet known to precede a later returned one; each
// invocation gets an edge from every frontier member, and a transaction's return retires the
// members it was ordered after. That keeps the edges near n × concurrency instead of n².
// An indeterminate transaction never returned: it gets edges in, never out.
func (c *txnChecker) realtimeEdges() {
	type event struct {
		at  int64
		ret bool
		txn int32
	}
	h := c.h
	var events []event
	for i := range h.Txns {
		if !c.included[i] {
			continue
		}
		events = append(events, event{at: h.Txns[i].Invoke, txn: int32(i)})
		if h.Txns[i].Outcome == TxnOK {
			events = append(events, event{at: h.Txns[i].Return, ret: true, txn: int32(i)})
		}
	}
	// At equal times invocations come first: only a return strictly before an invocation
	// orders two transactions.
	slices.SortFunc(events, func(a, b event) int {
		switch {
		case a.at != b.at:
			return cmpInt64(a.at, b.at)
		case a.ret != b.ret:
			if a.ret {
				return 1
			}
			return -1
		}
		return int(a.txn) - int(b.txn)
	})
	preds := map[int32][]int32{} // frontier at each open transaction's invocation
	retired := make([]bool, len(h.Txns))
	var frontier []int32
	for _, ev := range events {
		if c.budget.expired {
			return
		}
		if !ev.ret {
			for _, f := range frontier {
				c.g.add(txnEdge{from: f, to: ev.txn, kind: edgeRT, basis: basisRealtime}, c.budget)
			}
			if h.Txns[ev.txn].Outcome == TxnOK {
				preds[ev.txn] = slices.Clone(frontier)
			}
			continue
		}
		for _, p := range preds[ev.txn] {
			retired[p] = true
		}
		delete(preds, ev.txn)
		frontier = slices.DeleteFunc(frontier, func(f int32) bool { return retired[f] })
		frontier = append(frontier, ev.txn)
	}
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// describeEdge says what an edge was inferred from, in the words of the history.
func (c *txnChecker) describeEdge(e *txnEdge) string {
	a, b := c.name(e.from), c.name(e.to)
	if e.kind == edgeRT {
		ta, tb := &c.h.Txns[e.from], &c.h.Txns[e.to]
		return fmt.Sprintf("%s -rt-> %s: %s returned at %.3fms, before %s was invoked at %.3fms",
			a, b, a, float64(ta.Return)/1e6, b, float64(tb.Invoke)/1e6)
	}
	head := fmt.Sprintf("%s -%s(%s)-> %s: ", a, e.kind, e.key, b)
	switch e.basis {
	case basisListOrder:
		return head + fmt.Sprintf("%s appended %d to %s before %s appended %d", a, e.v1, e.key, b, e.v2)
	case basisListRead:
		return head + fmt.Sprintf("%s read %s=%s, whose last element %d %s appended", b, e.key, fmtTxnList(c.mop(e.readTxn, e.readMop).List), e.v1, a)
	case basisListMissed:
		list := c.mop(e.readTxn, e.readMop).List
		if len(list) == 0 {
			return head + fmt.Sprintf("%s read %s=[] and so did not see %d, the first element, which %s appended", a, e.key, e.v2, b)
		}
		return head + fmt.Sprintf("%s read %s=%s and did not see %d, which %s appended next", a, e.key, fmtTxnList(list), e.v2, b)
	case basisListUnseenOrder:
		return head + fmt.Sprintf("%s appended %d to %s, the last element any read saw, and %s appended %d, which no read saw, so it comes later",
			a, e.v1, e.key, b, e.v2)
	case basisListUnseen:
		return head + fmt.Sprintf("%s read %s=%s and did not see %d, which %s appended (no read saw %d, so it follows every element read)",
			a, e.key, fmtTxnList(c.mop(e.readTxn, e.readMop).List), e.v2, b, e.v2)
	case basisRegRead:
		return head + fmt.Sprintf("%s read %s=%d, which %s wrote", b, e.key, e.v1, a)
	case basisRegOverwrite:
		return head + fmt.Sprintf("%s read %s=%d, which %s wrote, then overwrote it with %d", b, e.key, e.v1, a, e.v2)
	case basisRegMissed:
		if e.absent {
			return head + fmt.Sprintf("%s read %s absent (its initial state), which %s overwrote with %d", a, e.key, b, e.v2)
		}
		return head + fmt.Sprintf("%s read %s=%d, a version %s also read and then overwrote with %d", a, e.key, e.v1, b, e.v2)
	}
	return head + "dependency"
}

// explainCycle renders a cycle: a header naming its class, then one line per edge.
func (c *txnChecker) explainCycle(cyc txnCycle) Anomaly {
	var b strings.Builder
	switch cyc.kind { // the Kind field names the class; the header says what it means
	case anomalyG0:
		b.WriteString("write cycle: the transactions' writes were installed in a cycle")
	case anomalyG1c:
		b.WriteString("circular information flow: each transaction's write precedes, or was read by, the next, in a cycle")
	case anomalyGSingle:
		b.WriteString("read skew or lost update: a dependency cycle with exactly one anti-dependency (rw)")
	case anomalyG2:
		fmt.Fprintf(&b, "anti-dependency cycle (e.g. write skew): a dependency cycle with %d anti-dependencies (rw)", cyc.rw)
	case anomalyGRealtime:
		b.WriteString("real-time cycle: a dependency cycle through real-time order (rt)")
	}
	b.WriteString("; each edge says a transaction must come before the next in the serial order, so there is none:")
	ids := make([]int, 0, len(cyc.edges))
	for _, ei := range cyc.edges {
		e := &c.g.edges[ei]
		ids = append(ids, c.h.Txns[e.from].ID)
		b.WriteString("\n  ")
		b.WriteString(c.describeEdge(e))
	}
	return Anomaly{Kind: cyc.kind, Txns: ids, Explanation: b.String()}
}
