package check

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// txnTimeout is generous: every history here is checked in milliseconds, and a slow machine
// must not turn a pass into Unknown.
const txnTimeout = 30 * time.Second

// Terse builders for hand-made histories. Transaction i runs over [10i, 10i+5]: one after
// another in real time, so strict serializability orders them by ID unless a test sets the
// times itself.
func txAppend(key string, v int64) Mop { return Mop{Kind: MopAppend, Key: key, Value: v} }
func txWrite(key string, v int64) Mop  { return Mop{Kind: MopWrite, Key: key, Value: v} }
func txRead(key string, list ...int64) Mop {
	return Mop{Kind: MopRead, Key: key, List: list}
}
func txReadReg(key string, v int64) Mop {
	return Mop{Kind: MopRead, Key: key, ReadValue: v, ReadFound: true}
}
func txReadAbsent(key string) Mop { return Mop{Kind: MopRead, Key: key} }

func txOK(id int, ops ...Mop) Txn {
	return Txn{ID: id, Process: id, Invoke: int64(id) * 10, Return: int64(id)*10 + 5, Outcome: TxnOK, Ops: ops}
}

func txAborted(id int, ops ...Mop) Txn {
	t := txOK(id, ops...)
	t.Outcome = TxnAborted
	return t
}

func txIndet(id int, ops ...Mop) Txn {
	t := txOK(id, ops...)
	t.Outcome, t.Return = TxnIndeterminate, 0
	return t
}

func txList(txns ...Txn) TxnHistory { return TxnHistory{Txns: txns} }
func txRegs(txns ...Txn) TxnHistory { return TxnHistory{Txns: txns, Registers: true} }

// txnCase is a hand-made history and what both checkers must say about it: the kind of the
// first anomaly ("" for Ok), the transactions it names, and phrases of its explanation.
type txnCase struct {
	name    string
	h       TxnHistory
	kind    string
	txns    []int    // the first anomaly's Txns, in any order (nil: not checked)
	explain []string // substrings of the first anomaly's explanation
	count   int      // exact number of anomalies (0: not checked)
}

func runTxnCases(t *testing.T, cases []txnCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Real time only adds edges, and each case's transactions run in ID order, so
			// strict serializability must find exactly the same first anomaly.
			for _, check := range []struct {
				name string
				fn   func(TxnHistory, time.Duration) (Result, []Anomaly)
			}{{"serializable", CheckSerializable}, {"strict", CheckStrictSerializable}} {
				res, anomalies := check.fn(tc.h, txnTimeout)
				for _, a := range anomalies {
					t.Logf("%s: %v %v", check.name, a, a.Txns)
				}
				wantTxnResult(t, check.name, res, anomalies, tc)
			}
		})
	}
}

func wantTxnResult(t *testing.T, checker string, res Result, anomalies []Anomaly, tc txnCase) {
	t.Helper()
	if tc.kind == "" {
		if res != Ok || len(anomalies) != 0 {
			t.Fatalf("%s: want ok, got %v with %d anomalies", checker, res, len(anomalies))
		}
		return
	}
	if res != Illegal || len(anomalies) == 0 {
		t.Fatalf("%s: want illegal (%s), got %v", checker, tc.kind, res)
	}
	first := anomalies[0]
	if first.Kind != tc.kind {
		t.Fatalf("%s: first anomaly is %s, want %s:\n%v", checker, first.Kind, tc.kind, first)
	}
	if tc.txns != nil && !sameTxnIDs(first.Txns, tc.txns) {
		t.Fatalf("%s: anomaly names %v, want %v:\n%v", checker, first.Txns, tc.txns, first)
	}
	for _, s := range tc.explain {
		if !strings.Contains(first.Explanation, s) {
			t.Fatalf("%s: explanation does not mention %q:\n%s", checker, s, first.Explanation)
		}
	}
	if tc.count > 0 && len(anomalies) != tc.count {
		t.Fatalf("%s: %d anomalies, want %d", checker, len(anomalies), tc.count)
	}
}

func sameTxnIDs(got, want []int) bool {
	a, b := slices.Clone(got), slices.Clone(want)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func TestTxnListAppendAnomalies(t *testing.T) {
	runTxnCases(t, []txnCase{
		{
			name: "serial history",
			h: txList(
				txOK(1, txAppend("x", 1)),
				txOK(2, txRead("x", 1), txAppend("x", 2), txRead("x", 1, 2)),
				txOK(3, txRead("x", 1, 2), txRead("y")),
				txOK(4, txAppend("y", 1), txAppend("x", 3)),
				txOK(5, txRead("y", 1), txRead("x", 1, 2, 3)),
			),
		},
		{
			// T1 and T2 each append to x and y; T3 sees them in opposite orders.
			name: "G0 write cycle",
			h: txList(
				txOK(1, txAppend("x", 1), txAppend("y", 1)),
				txOK(2, txAppend("x", 2), txAppend("y", 2)),
				txOK(3, txRead("x", 1, 2), txRead("y", 2, 1)),
			),
			kind: "G0", txns: []int{1, 2}, count: 1,
			explain: []string{
				"T1 -ww(x)-> T2: T1 appended 1 to x before T2 appended 2",
				"T2 -ww(y)-> T1: T2 appended 2 to y before T1 appended 1",
			},
		},
		{
			name: "G1a aborted read",
			h: txList(
				txAborted(1, txAppend("x", 1)),
				txOK(2, txRead("x", 1)),
			),
			kind: "G1a", txns: []int{2, 1}, count: 1,
			explain: []string{"T2 read x=[1]", "T1", "aborted"},
		},
		{
			name: "G1b intermediate read",
			h: txList(
				txOK(1, txAppend("x", 1), txAppend("x", 2)),
				txOK(2, txRead("x", 1)),
				txOK(3, txRead("x", 1, 2)),
			),
			kind: "G1b", txns: []int{2, 1},
			explain: []string{"T2 read x=[1]", "T1 appended 1 to x and then appended 2"},
		},
		{
			// Each reads the other's write: information flowed both ways.
			name: "G1c circular information flow",
			h: txList(
				txOK(1, txAppend("x", 1), txRead("y", 1)),
				txOK(2, txAppend("y", 1), txRead("x", 1)),
			),
			kind: "G1c", txns: []int{1, 2}, count: 1,
			explain: []string{
				"T1 -wr(x)-> T2: T2 read x=[1], whose last element 1 T1 appended",
				"T2 -wr(y)-> T1: T1 read y=[1], whose last element 1 T2 appended",
			},
		},
		{
			// Both read x empty and appended: T2's append should have seen T1's.
			name: "G-single lost update",
			h: txList(
				txOK(1, txRead("x"), txAppend("x", 1)),
				txOK(2, txRead("x"), txAppend("x", 2)),
				txOK(3, txRead("x", 1, 2)),
			),
			kind: "G-single", txns: []int{1, 2}, count: 1,
			explain: []string{
				"T1 -ww(x)-> T2: T1 appended 1 to x before T2 appended 2",
				"T2 -rw(x)-> T1: T2 read x=[] and so did not see 1, the first element, which T1 appended",
			},
		},
		{
			// T1 sees T2's write to y but not its write to x.
			name: "G-single read skew",
			h: txList(
				txOK(1, txRead("x"), txRead("y", 1)),
				txOK(2, txAppend("x", 1), txAppend("y", 1)),
				txOK(3, txRead("x", 1)),
			),
			kind: "G-single", txns: []int{1, 2},
			explain: []string{"T1 -rw(x)-> T2", "T2 -wr(y)-> T1: T1 read y=[1], whose last element 1 T2 appended"},
		},
		{
			// Each read both keys empty and appended to one: neither saw the other's.
			name: "G2 write skew",
			h: txList(
				txOK(1, txRead("x"), txRead("y"), txAppend("x", 1)),
				txOK(2, txRead("x"), txRead("y"), txAppend("y", 1)),
				txOK(3, txRead("x", 1), txRead("y", 1)),
			),
			kind: "G2", txns: []int{1, 2}, count: 1,
			explain: []string{"2 anti-dependencies", "T1 -rw(y)-> T2", "T2 -rw(x)-> T1"},
		},
		{
			name: "incompatible order",
			h: txList(
				txOK(1, txAppend("x", 1)),
				txOK(2, txAppend("x", 2)),
				txOK(3, txRead("x", 1, 2)),
				txOK(4, txRead("x", 2, 1)),
			),
			kind: "incompatible-order", txns: []int{3, 4}, count: 1,
			explain: []string{"T3 read x=[1 2] but T4 read x=[2 1]"},
		},
		{
			name: "internal: a read misses the transaction's own append",
			h: txList(
				txOK(1, txAppend("x", 1), txRead("x")),
			),
			kind: "internal", txns: []int{1}, count: 1,
			explain: []string{"T1 appended [1] to x, then read x=[]"},
		},
		{
			name: "internal: a read disagrees with an earlier read",
			h: txList(
				txOK(1, txAppend("x", 1)),
				txOK(2, txRead("x", 1), txAppend("x", 2), txRead("x", 2)),
			),
			kind: "internal", txns: []int{2}, count: 1,
			explain: []string{"T2 read x=[2]", "must be [1 2]"},
		},
		{
			name: "duplicate append",
			h: txList(
				txOK(1, txAppend("x", 1)),
				txOK(2, txRead("x", 1, 1)),
			),
			kind: "duplicate-append", txns: []int{2},
			explain: []string{"holds 1 twice"},
		},
		{
			name: "unknown value",
			h: txList(
				txOK(1, txRead("x", 9)),
			),
			kind: "unknown-value", txns: []int{1}, count: 1,
			explain: []string{"no transaction appended 9 to x"},
		},
		{
			name: "malformed: a value appended twice",
			h: txList(
				txOK(1, txAppend("x", 1)),
				txOK(2, txAppend("x", 1)),
				txOK(3, txRead("x", 1)),
			),
			kind: "malformed", txns: []int{1, 2}, count: 1,
		},
		{
			name: "malformed: a register write in a list history",
			h:    txList(txOK(1, txWrite("x", 1))),
			kind: "malformed", txns: []int{1},
		},
		{
			// One component holds a G-single of two transactions (T2 -rw(f)-> T1 -ww(a)-> T2)
			// and a G0 of three (T1 → T2 → T3 → T1 through a, b, c). The write cycle is the
			// more basic anomaly, so it is the one reported, though longer.
			name: "the most basic cycle wins over the shortest",
			h: txList(
				txOK(1, txAppend("a", 1), txAppend("c", 1), txAppend("f", 1)),
				txOK(2, txAppend("a", 2), txAppend("b", 2), txRead("f")),
				txOK(3, txAppend("b", 3), txAppend("c", 3)),
				txOK(4, txRead("a", 1, 2), txRead("b", 2, 3), txRead("c", 3, 1), txRead("f", 1)),
			),
			kind: "G0", txns: []int{1, 2, 3}, count: 1,
		},
		{
			// The same write cycle, now beside a G1c of two (T1 -ww(a)-> T2 -wr(g)-> T1).
			name: "a write cycle wins over a shorter G1c",
			h: txList(
				txOK(1, txAppend("a", 1), txAppend("c", 1), txRead("g", 2)),
				txOK(2, txAppend("a", 2), txAppend("b", 2), txAppend("g", 2)),
				txOK(3, txAppend("b", 3), txAppend("c", 3)),
				txOK(4, txRead("a", 1, 2), txRead("b", 2, 3), txRead("c", 3, 1)),
			),
			kind: "G0", txns: []int{1, 2, 3}, count: 1,
		},
		{
			// A write skew of two (T1 -rw(y)-> T2 -rw(x)-> T1) beside a G-single of three
			// (T1 -rw(y)-> T2 -ww(z)-> T3 -wr(w)-> T1): one anti-dependency is the more basic.
			name: "a G-single wins over a shorter G2",
			h: txList(
				txOK(1, txRead("x"), txRead("y"), txAppend("x", 1), txRead("w", 3)),
				txOK(2, txRead("x"), txRead("y"), txAppend("y", 1), txAppend("z", 2)),
				txOK(3, txAppend("z", 3), txAppend("w", 3)),
				txOK(4, txRead("x", 1), txRead("y", 1), txRead("z", 2, 3)),
			),
			kind: "G-single", txns: []int{1, 2, 3}, count: 1,
			explain: []string{"T1 -rw(y)-> T2", "T2 -ww(z)-> T3", "T3 -wr(w)-> T1"},
		},
	})
}

func TestTxnRegisterAnomalies(t *testing.T) {
	runTxnCases(t, []txnCase{
		{
			name: "serial history",
			h: txRegs(
				txOK(1, txWrite("x", 1)),
				txOK(2, txReadReg("x", 1), txWrite("x", 2), txReadReg("x", 2)),
				txOK(3, txReadReg("x", 2), txReadAbsent("y")),
				txOK(4, txWrite("y", 1), txReadReg("x", 2)),
				txOK(5, txReadReg("y", 1), txWrite("y", 2), txWrite("x", 3)),
			),
		},
		{
			name: "G2 write skew",
			h: txRegs(
				txOK(1, txReadAbsent("x"), txReadAbsent("y"), txWrite("x", 1)),
				txOK(2, txReadAbsent("x"), txReadAbsent("y"), txWrite("y", 1)),
			),
			kind: "G2", txns: []int{1, 2}, count: 1,
			explain: []string{
				"T1 -rw(y)-> T2: T1 read y absent (its initial state), which T2 overwrote with 1",
				"T2 -rw(x)-> T1: T2 read x absent (its initial state), which T1 overwrote with 1",
			},
		},
		{
			// Both read x=1 and overwrote it. Which overwrite came first is unknown (a register
			// shows only its latest value), so the checker sees an anti-dependency each way: a
			// G2 cycle. (Either order of the two writes would make it a G-single.)
			name: "lost update",
			h: txRegs(
				txOK(1, txWrite("x", 1)),
				txOK(2, txReadReg("x", 1), txWrite("x", 2)),
				txOK(3, txReadReg("x", 1), txWrite("x", 3)),
			),
			kind: "G2", txns: []int{2, 3}, count: 1,
			explain: []string{
				"T2 -rw(x)-> T3: T2 read x=1, a version T3 also read and then overwrote with 3",
				"T3 -rw(x)-> T2: T3 read x=1, a version T2 also read and then overwrote with 2",
			},
		},
		{
			name: "G-single read skew",
			h: txRegs(
				txOK(1, txReadAbsent("x"), txReadReg("y", 1)),
				txOK(2, txWrite("x", 1), txWrite("y", 1)),
			),
			kind: "G-single", txns: []int{1, 2}, count: 1,
			explain: []string{"T1 -rw(x)-> T2", "T2 -wr(y)-> T1: T1 read y=1, which T2 wrote"},
		},
		{
			// Each read the other's write to one key and overwrote it: the version orders of x
			// and y disagree.
			name: "G0 write cycle",
			h: txRegs(
				txOK(1, txWrite("x", 1), txReadReg("y", 2), txWrite("y", 1)),
				txOK(2, txWrite("y", 2), txReadReg("x", 1), txWrite("x", 2)),
			),
			kind: "G0", txns: []int{1, 2}, count: 1,
			explain: []string{
				"T1 -ww(x)-> T2: T2 read x=1, which T1 wrote, then overwrote it with 2",
				"T2 -ww(y)-> T1: T1 read y=2, which T2 wrote, then overwrote it with 1",
			},
		},
		{
			name: "G1c circular information flow",
			h: txRegs(
				txOK(1, txWrite("x", 1), txReadReg("y", 1)),
				txOK(2, txWrite("y", 1), txReadReg("x", 1)),
			),
			kind: "G1c", txns: []int{1, 2}, count: 1,
		},
		{
			name: "G1a aborted read",
			h: txRegs(
				txAborted(1, txWrite("x", 1)),
				txOK(2, txReadReg("x", 1)),
			),
			kind: "G1a", txns: []int{1, 2}, count: 1,
		},
		{
			name: "G1b intermediate read",
			h: txRegs(
				txOK(1, txWrite("x", 1), txWrite("x", 2)),
				txOK(2, txReadReg("x", 1)),
			),
			kind: "G1b", txns: []int{1, 2}, count: 1,
			explain: []string{"T1 wrote 1 to x and then wrote 2"},
		},
		{
			name: "internal",
			h: txRegs(
				txOK(1, txWrite("x", 1), txReadAbsent("x")),
			),
			kind: "internal", txns: []int{1}, count: 1,
			explain: []string{"T1 read x=absent, but it had just written x=1"},
		},
	})
}

// An indeterminate transaction whose write was observed committed, so it counts in full; one
// whose writes nobody observed is dropped. Its reads never count: the client never learned
// them.
func TestTxnIndeterminate(t *testing.T) {
	runTxnCases(t, []txnCase{
		{
			name: "observed: counted as committed",
			h: txList(
				txIndet(1, txAppend("x", 1), txAppend("y", 1)),
				txOK(2, txRead("x", 1), txRead("y")),
				txOK(3, txRead("y", 1)),
			),
			kind: "G-single", txns: []int{1, 2}, count: 1,
			explain: []string{"T1 -wr(x)-> T2", "T2 -rw(y)-> T1"},
		},
		{
			name: "unobserved: dropped",
			h: txList(
				txIndet(1, txAppend("x", 1), txRead("y", 5)),
				txOK(2, txRead("x")),
				txOK(3, txAppend("x", 2)),
				txOK(4, txRead("x", 2)),
			),
		},
		{
			name: "observed, its reads ignored",
			h: txList(
				txIndet(1, txAppend("x", 1), txRead("y", 7), txRead("x")),
				txOK(2, txRead("x", 1)),
			),
		},
	})
}

// An aborted transaction took no effect: its reads (however inconsistent) and its unobserved
// appends are ignored, and it may even reuse a value a committed transaction appended.
func TestTxnAbortedIgnored(t *testing.T) {
	runTxnCases(t, []txnCase{{
		name: "aborted",
		h: txList(
			txAborted(1, txAppend("x", 1), txRead("x"), txRead("y", 2, 1), txRead("z", 9)),
			txOK(2, txAppend("y", 1)),
			txOK(3, txAppend("y", 2)),
			txOK(4, txRead("y", 1, 2), txRead("x")),
			txAborted(5, txAppend("y", 1), txAppend("x", 7)),
			txOK(6, txRead("x")),
		),
	}})
}

// Real time: T2 began after T1 returned yet missed its append. Serializable (T2 then T1),
// not strictly serializable.
func TestTxnStrictSerializable(t *testing.T) {
	const ms = int64(time.Millisecond)
	h := txList(
		Txn{ID: 1, Invoke: 0, Return: 10 * ms, Outcome: TxnOK, Ops: []Mop{txAppend("x", 1)}},
		Txn{ID: 2, Invoke: 20 * ms, Return: 30 * ms, Outcome: TxnOK, Ops: []Mop{txRead("x")}},
		Txn{ID: 3, Invoke: 40 * ms, Return: 50 * ms, Outcome: TxnOK, Ops: []Mop{txRead("x", 1)}},
	)
	if res, anomalies := CheckSerializable(h, txnTimeout); res != Ok {
		t.Fatalf("serializable as T2, T1, T3, got %v %v", res, anomalies)
	}
	res, anomalies := CheckStrictSerializable(h, txnTimeout)
	wantTxnResult(t, "strict", res, anomalies, txnCase{
		kind: "G-realtime", txns: []int{1, 2}, count: 1,
		explain: []string{
			"T1 -rt-> T2: T1 returned at 10.000ms, before T2 was invoked at 20.000ms",
			"T2 -rw(x)-> T1: T2 read x=[] and so did not see 1",
		},
	})
	t.Log(anomalies[0])

	// Overlapping in time, T2 may take effect first.
	h.Txns[1].Invoke = 5 * ms
	if res, anomalies := CheckStrictSerializable(h, txnTimeout); res != Ok {
		t.Fatalf("concurrent transactions may serialize either way, got %v %v", res, anomalies)
	}
	// An indeterminate transaction never returned, so it precedes nothing in real time.
	h.Txns[1].Invoke = 20 * ms
	h.Txns[0].Outcome = TxnIndeterminate
	if res, anomalies := CheckStrictSerializable(h, txnTimeout); res != Ok {
		t.Fatalf("an indeterminate transaction has no real-time successors, got %v %v", res, anomalies)
	}
}

// More anomalies than the report holds: the most basic come first, and at most 8.
func TestTxnAnomalyReportIsCapped(t *testing.T) {
	var txns []Txn
	for i := range 10 {
		x, y := fmt.Sprintf("x%d", i), fmt.Sprintf("y%d", i)
		txns = append(txns,
			txOK(3*i+1, txRead(x), txRead(y), txAppend(x, 1)),
			txOK(3*i+2, txRead(x), txRead(y), txAppend(y, 1)),
			txOK(3*i+3, txRead(x, 1), txRead(y, 1)),
		)
	}
	txns = append(txns, txOK(100, txAppend("z", 1), txRead("z")))
	res, anomalies := CheckSerializable(txList(txns...), txnTimeout)
	if res != Illegal || len(anomalies) != maxTxnAnomalies {
		t.Fatalf("want %d anomalies, got %v %d", maxTxnAnomalies, res, len(anomalies))
	}
	if anomalies[0].Kind != "internal" {
		t.Fatalf("the internal anomaly is the most basic and should come first, got %v", anomalies[0])
	}
	for _, a := range anomalies[1:] {
		if a.Kind != "G2" {
			t.Fatalf("want the write skews after it, got %v", a)
		}
	}
}

// genSerialTxns executes n transactions one at a time against an in-memory store of keys
// lists (or registers) and records what each observed, so the history is serializable — in
// real-time order, even — by construction. About 5% abort (their writes are discarded) and
// 5% are indeterminate (their writes applied or not, at random). Each transaction has one to
// four mops; a third of them reuse the previous mop's key, so that reads followed by writes
// of the same key (the shape that reveals lost updates) are common.
func genSerialTxns(rng *rand.Rand, n, keys int, registers bool) TxnHistory {
	h := TxnHistory{Registers: registers}
	lists := map[string][]int64{}
	regs := map[string]int64{}
	nextValue := map[string]int64{}
	for i := range n {
		t := Txn{ID: i + 1, Process: i % 10, Invoke: int64(i) * 1000, Return: int64(i)*1000 + 500, Outcome: TxnOK}
		switch x := rng.IntN(100); {
		case x < 5:
			t.Outcome = TxnAborted
		case x < 10:
			t.Outcome, t.Return = TxnIndeterminate, 0
		}
		// The transaction's own view: committed state plus its writes so far.
		viewLists := map[string][]int64{}
		viewRegs := map[string]int64{}
		key := ""
		for range 1 + rng.IntN(4) {
			if key == "" || rng.IntN(3) != 0 {
				key = fmt.Sprintf("k%d", rng.IntN(keys))
			}
			if _, ok := viewLists[key]; !ok {
				viewLists[key] = slices.Clone(lists[key])
			}
			if _, ok := viewRegs[key]; !ok {
				if v, ok := regs[key]; ok {
					viewRegs[key] = v
				}
			}
			if rng.IntN(2) == 0 {
				m := Mop{Kind: MopRead, Key: key}
				if registers {
					m.ReadValue, m.ReadFound = viewRegs[key]
				} else if l := viewLists[key]; len(l) > 0 {
					m.List = slices.Clone(l)
				}
				t.Ops = append(t.Ops, m)
				continue
			}
			nextValue[key]++
			v := nextValue[key]
			if registers {
				t.Ops = append(t.Ops, Mop{Kind: MopWrite, Key: key, Value: v})
				viewRegs[key] = v
			} else {
				t.Ops = append(t.Ops, Mop{Kind: MopAppend, Key: key, Value: v})
				viewLists[key] = append(viewLists[key], v)
			}
		}
		if t.Outcome == TxnOK || (t.Outcome == TxnIndeterminate && rng.IntN(2) == 0) {
			for _, m := range t.Ops {
				switch m.Kind {
				case MopAppend:
					lists[m.Key] = append(lists[m.Key], m.Value)
				case MopWrite:
					regs[m.Key] = m.Value
				}
			}
		}
		h.Txns = append(h.Txns, t)
	}
	return h
}

func TestTxnRandomSerialHistoriesPass(t *testing.T) {
	for _, registers := range []bool{false, true} {
		for seed := range uint64(3) {
			h := genSerialTxns(rand.New(rand.NewPCG(seed, 7)), 2000, 50, registers)
			start := time.Now()
			res, anomalies := CheckSerializable(h, txnTimeout)
			elapsed := time.Since(start)
			if res != Ok {
				t.Fatalf("registers=%v seed %d: a serial history must pass, got %v:\n%v", registers, seed, res, anomalies)
			}
			if res, anomalies := CheckStrictSerializable(h, txnTimeout); res != Ok {
				t.Fatalf("registers=%v seed %d: it ran serially in real time too, got %v:\n%v", registers, seed, res, anomalies)
			}
			t.Logf("registers=%v seed %d: %d txns checked in %v", registers, seed, len(h.Txns), elapsed)
		}
	}
}

// One read of a serial history made stale — it misses the last append it saw, by a
// transaction that appended to the same key afterwards — is a lost update: the reader
// overwrote state it did not see. The checker must find that one G-single among 2,000
// transactions.
func TestTxnStaleReadInSerialHistoryFails(t *testing.T) {
	for seed := range uint64(5) {
		h := genSerialTxns(rand.New(rand.NewPCG(seed, 11)), 2000, 50, false)
		target, mop := staleTxnCandidate(rand.New(rand.NewPCG(seed, 12)), h)
		if target < 0 {
			t.Fatalf("seed %d: no read followed by an append of its key", seed)
		}
		if res, anomalies := CheckSerializable(h, txnTimeout); res != Ok {
			t.Fatalf("seed %d: unmutated history must pass, got %v %v", seed, res, anomalies)
		}
		m := &h.Txns[target].Ops[mop]
		m.List = m.List[:len(m.List)-1]
		res, anomalies := CheckSerializable(h, txnTimeout)
		if res != Illegal {
			t.Fatalf("seed %d: T%d's stale read of %s went unnoticed: %v", seed, h.Txns[target].ID, m.Key, res)
		}
		first := anomalies[0]
		t.Logf("seed %d (of %d anomalies): %v", seed, len(anomalies), first)
		if first.Kind != "G-single" || !slices.Contains(first.Txns, h.Txns[target].ID) {
			t.Fatalf("seed %d: want a G-single through T%d, got %v %v", seed, h.Txns[target].ID, first, first.Txns)
		}
	}
}

// staleTxnCandidate finds a committed transaction's read of a non-empty list that is its
// first mop on the key and is followed by appends only (one of which a later read saw), and
// whose last two elements (if it
// has two) were appended by different transactions: dropping the last element then leaves a
// read of some transaction's final append, so the only anomaly is the lost update. It picks
// one at random, or returns -1.
func staleTxnCandidate(rng *rand.Rand, h TxnHistory) (txn, mop int) {
	var candidates [][2]int
	appender := map[txnKV]int{}
	observed := map[txnKV]bool{}
	for i, t := range h.Txns {
		for _, m := range t.Ops {
			if m.Kind == MopAppend {
				appender[txnKV{m.Key, m.Value}] = i
			}
			if m.Kind == MopRead && t.Outcome == TxnOK {
				for _, v := range m.List {
					observed[txnKV{m.Key, v}] = true
				}
			}
		}
	}
	for i, t := range h.Txns {
		if t.Outcome != TxnOK {
			continue
		}
	mops:
		for j, m := range t.Ops {
			if m.Kind != MopRead || len(m.List) == 0 {
				continue
			}
			for _, prev := range t.Ops[:j] {
				if prev.Key == m.Key {
					continue mops
				}
			}
			appends := false
			for _, later := range t.Ops[j+1:] {
				if later.Key == m.Key {
					if later.Kind != MopAppend {
						continue mops
					}
					appends = appends || observed[txnKV{m.Key, later.Value}]
				}
			}
			l := m.List
			if appends && (len(l) == 1 || appender[txnKV{m.Key, l[len(l)-1]}] != appender[txnKV{m.Key, l[len(l)-2]}]) {
				candidates = append(candidates, [2]int{i, j})
			}
		}
	}
	if len(candidates) == 0 {
		return -1, -1
	}
	c := candidates[rng.IntN(len(candidates))]
	return c[0], c[1]
}

// A check that runs out of time proves nothing: Unknown, without anomalies.
func TestTxnTimeoutIsUnknown(t *testing.T) {
	h := genSerialTxns(rand.New(rand.NewPCG(1, 1)), 2000, 50, false)
	if res, anomalies := CheckSerializable(h, time.Nanosecond); res != Unknown || len(anomalies) != 0 {
		t.Fatalf("want unknown, got %v %v", res, anomalies)
	}
	if res, _ := CheckSerializable(h, 0); res != Ok {
		t.Fatalf("no timeout: want ok, got %v", res)
	}
}

// BenchmarkCheckSerializable checks a 10,000-transaction, 50-key list-append history.
func BenchmarkCheckSerializable(b *testing.B) {
	h := genSerialTxns(rand.New(rand.NewPCG(1, 1)), 10_000, 50, false)
	if res, anomalies := CheckSerializable(h, 0); res != Ok {
		b.Fatal(res, anomalies)
	}
	b.ReportAllocs()
	for b.Loop() {
		CheckSerializable(h, 0)
	}
}

// genSkewedTxns runs a few transactions in a random serial order, but lets every read return
// an older state of its key than the serial order would (a random prefix of a list, or a
// random earlier version of a register), on top of which the transaction's own writes stay
// visible. Most of these histories are not serializable, in all sorts of ways; some are.
//
// With outcomes, some transactions abort (their writes are discarded) and some are
// indeterminate (their writes applied or not).
func genSkewedTxns(rng *rand.Rand, n, keys int, registers, outcomes bool) TxnHistory {
	h := TxnHistory{Registers: registers}
	versions := map[string][]int64{} // per key, every value applied, oldest first
	nextValue := map[string]int64{}
	for i := range n {
		// Random times, for strict serializability: they have nothing to do with the order
		// the transactions ran in, so real time is often violated too.
		invoke := int64(rng.IntN(100))
		t := Txn{ID: i + 1, Process: i, Outcome: TxnOK, Invoke: invoke, Return: invoke + int64(rng.IntN(40))}
		view := map[string][]int64{} // lists: the state seen; registers: versions seen, last current
		for range 1 + rng.IntN(3) {
			key := fmt.Sprintf("k%d", rng.IntN(keys))
			if _, ok := view[key]; !ok {
				all := versions[key]
				view[key] = slices.Clone(all[:rng.IntN(len(all)+1)])
			}
			if rng.IntN(2) == 0 {
				m := Mop{Kind: MopRead, Key: key}
				if l := view[key]; registers && len(l) > 0 {
					m.ReadValue, m.ReadFound = l[len(l)-1], true
				} else if !registers && len(l) > 0 {
					m.List = slices.Clone(l)
				}
				t.Ops = append(t.Ops, m)
				continue
			}
			nextValue[key]++
			kind := MopAppend
			if registers {
				kind = MopWrite
			}
			t.Ops = append(t.Ops, Mop{Kind: kind, Key: key, Value: nextValue[key]})
			view[key] = append(view[key], nextValue[key])
		}
		applied := true
		if outcomes {
			switch x := rng.IntN(100); {
			case x < 10:
				t.Outcome, applied = TxnAborted, false
			case x < 25:
				t.Outcome, t.Return, applied = TxnIndeterminate, 0, rng.IntN(2) == 0
			}
		}
		for _, m := range t.Ops {
			if m.Kind != MopRead && applied {
				versions[m.Key] = append(versions[m.Key], m.Value)
			}
		}
		h.Txns = append(h.Txns, t)
	}
	rng.Shuffle(len(h.Txns), func(a, b int) { h.Txns[a], h.Txns[b] = h.Txns[b], h.Txns[a] })
	return h
}

// serializableByBruteForce tries every order of the committed transactions, each time with
// every subset of the indeterminate ones (aborted ones never count): the history is
// serializable iff executing them one at a time in some order reproduces every committed
// transaction's reads. With realtime, only orders in which no transaction precedes one that
// returned (committed) before it was invoked count.
func serializableByBruteForce(h TxnHistory, realtime bool) bool {
	var committed, indeterminate []int
	for i, t := range h.Txns {
		switch t.Outcome {
		case TxnOK:
			committed = append(committed, i)
		case TxnIndeterminate:
			indeterminate = append(indeterminate, i)
		}
	}
	for subset := range 1 << len(indeterminate) {
		order := slices.Clone(committed)
		for b, i := range indeterminate {
			if subset&(1<<b) != 0 {
				order = append(order, i)
			}
		}
		if someOrderReplays(h, order, realtime) {
			return true
		}
	}
	return false
}

// someOrderReplays tries every permutation of order (Heap's algorithm, iteratively).
func someOrderReplays(h TxnHistory, order []int, realtime bool) bool {
	replays := func() bool {
		if realtime {
			for p := range order {
				for _, q := range order[p+1:] {
					if h.Txns[q].Outcome == TxnOK && h.Txns[q].Return < h.Txns[order[p]].Invoke {
						return false
					}
				}
			}
		}
		lists := map[string][]int64{}
		for _, i := range order {
			for _, m := range h.Txns[i].Ops {
				l := lists[m.Key]
				switch m.Kind {
				case MopAppend:
					lists[m.Key] = append(l, m.Value)
				case MopWrite:
					lists[m.Key] = []int64{m.Value}
				case MopRead:
					if h.Txns[i].Outcome != TxnOK {
						continue
					}
					if h.Registers {
						found := len(l) > 0
						if found != m.ReadFound || (found && l[len(l)-1] != m.ReadValue) {
							return false
						}
					} else if !slices.Equal(l, m.List) {
						return false
					}
				}
			}
		}
		return true
	}
	c := make([]int, len(order))
	if replays() {
		return true
	}
	for i := 0; i < len(order); {
		if c[i] < i {
			if i%2 == 0 {
				order[0], order[i] = order[i], order[0]
			} else {
				order[c[i]], order[i] = order[i], order[c[i]]
			}
			if replays() {
				return true
			}
			c[i]++
			i = 0
			continue
		}
		c[i] = 0
		i++
	}
	return false
}

// The checker is sound: whatever it calls Illegal, no serial order explains. Exhaustive
// search over every order of five transactions (and every subset of the indeterminate ones)
// is the judge, with and without real time, with and without aborted and indeterminate
// transactions. For list-append histories it must also be complete — every non-serializable
// one caught — since their reads reveal the whole version order as far as it matters (with
// unseenAppendEdges), and an indeterminate transaction nobody observed can always be taken
// to have committed last, unseen. Registers reveal less, so there it need only be sound.
func TestTxnAgreesWithBruteForce(t *testing.T) {
	for _, outcomes := range []bool{false, true} {
		for _, registers := range []bool{false, true} {
			for _, strict := range []bool{false, true} {
				name := fmt.Sprintf("outcomes=%v/registers=%v/strict=%v", outcomes, registers, strict)
				t.Run(name, func(t *testing.T) { testTxnAgainstBruteForce(t, outcomes, registers, strict) })
			}
		}
	}
}

func testTxnAgainstBruteForce(t *testing.T, outcomes, registers, strict bool) {
	check := CheckSerializable
	if strict {
		check = CheckStrictSerializable
	}
	rng := rand.New(rand.NewPCG(3, 5))
	var illegal, caught, passed int
	for range 3000 {
		h := genSkewedTxns(rng, 5, 2, registers, outcomes)
		res, anomalies := check(h, txnTimeout)
		truth := serializableByBruteForce(h, strict)
		switch {
		case res == Unknown:
			t.Fatalf("a five-transaction history timed out")
		case res == Illegal && truth:
			t.Fatalf("the checker reports %v, but this history is serializable:\n%+v", anomalies[0], h.Txns)
		case res == Ok && !truth && !registers:
			t.Fatalf("the checker passes a non-serializable list-append history:\n%+v", h.Txns)
		case res == Ok && !truth:
			illegal++
		case res == Illegal:
			illegal++
			caught++
		default:
			passed++
		}
	}
	t.Logf("%d serializable, %d not, of which the checker caught %d", passed, illegal, caught)
	if passed == 0 || illegal == 0 {
		t.Fatalf("the generator should produce both kinds of history")
	}
}
