package sdur

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestTraces replays scripted protocol traces from testdata: one replica of partition 0, fed
// entries of its log, votes and time, printing what it asks the runtime to do and its pending
// list after each step.
//
//	replica [threshold=entries:K|ticks:K] [mutation=NAME] [retry=MS] [recovery=MS]
//	deliver txn=N.S parts=P,Q [snap=K] [reads=a,b] [writes=x,y]   (a transaction's part)
//	abort-request txn=N.S parts=P,Q
//	tick-entry [floor=K]
//	config threshold=entries:K|ticks:K
//	vote txn=N.S from=P commit|abort [key=K]
//	timer ms=N                                                     (Tick at t0 + N ms)
//	state
func TestTraces(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var r *Replica
		t0 := time.Unix(1000, 0)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			arg := func(key string) (string, bool) {
				for _, a := range d.CmdArgs {
					if a.Key == key {
						if len(a.Vals) == 0 {
							return "", true
						}
						return strings.Join(a.Vals, ","), true
					}
				}
				return "", false
			}
			txnID := func() TxnID {
				s, ok := arg("txn")
				if !ok {
					d.Fatalf(t, "txn=N.S is required")
				}
				node, seq, found := strings.Cut(s, ".")
				n, err1 := strconv.ParseUint(node, 10, 32)
				q, err2 := strconv.ParseUint(seq, 10, 64)
				if !found || err1 != nil || err2 != nil {
					d.Fatalf(t, "txn=%s: want N.S", s)
				}
				return TxnID{Node: uint32(n), Seq: q}
			}
			parts := func() []uint32 {
				s, _ := arg("parts")
				var out []uint32
				for _, f := range strings.Split(s, ",") {
					if f == "" {
						continue
					}
					v, err := strconv.ParseUint(f, 10, 32)
					if err != nil {
						d.Fatalf(t, "parts=%s: %v", s, err)
					}
					out = append(out, uint32(v))
				}
				if len(out) == 0 {
					out = []uint32{0}
				}
				return out
			}
			list := func(key string) []string {
				s, _ := arg(key)
				if s == "" {
					return nil
				}
				return strings.Split(s, ",")
			}
			threshold := func(s string) Threshold {
				unit, k, ok := strings.Cut(s, ":")
				n, err := strconv.ParseUint(k, 10, 64)
				if !ok || err != nil || (unit != "entries" && unit != "ticks") {
					d.Fatalf(t, "threshold=%s: want entries:K or ticks:K", s)
				}
				if unit == "ticks" {
					return Threshold{Unit: Ticks, K: n}
				}
				return Threshold{Unit: Entries, K: n}
			}
			ms := func(key string) time.Duration {
				s, ok := arg(key)
				if !ok {
					return 0
				}
				n, err := strconv.Atoi(s)
				if err != nil {
					d.Fatalf(t, "%s=%s: %v", key, s, err)
				}
				return time.Duration(n) * time.Millisecond
			}
			if d.Cmd != "replica" && r == nil {
				d.Fatalf(t, "%s before replica", d.Cmd)
			}
			now := t0
			switch d.Cmd {
			case "replica":
				o := Options{VoteRetry: ms("retry"), RecoveryTimeout: ms("recovery")}
				if s, ok := arg("threshold"); ok {
					o.Threshold = threshold(s)
				}
				if s, ok := arg("mutation"); ok {
					o.Mutation = s
				}
				var err error
				if r, err = NewReplica(0, o); err != nil {
					return "error: " + err.Error()
				}
				return "ok"
			case "deliver":
				p := &Part{ID: txnID(), Partition: 0, Partitions: parts(), Reads: list("reads"), Submitter: 9}
				if s, ok := arg("snap"); ok {
					v, err := strconv.ParseUint(s, 10, 64)
					if err != nil {
						d.Fatalf(t, "snap=%s: %v", s, err)
					}
					p.Snapshot = v
				}
				for _, k := range list("writes") {
					p.Writes = append(p.Writes, Write{Key: k, Value: []byte(k)})
				}
				r.Deliver(now, Entry{Kind: EntryTxn, Txn: p})
			case "abort-request":
				r.Deliver(now, Entry{Kind: EntryAbortRequest, Abort: &AbortRequest{Txn: txnID(), Partitions: parts(), Partition: 0}})
			case "tick-entry":
				e := Entry{Kind: EntryTick}
				if s, ok := arg("floor"); ok {
					v, _ := strconv.ParseUint(s, 10, 64)
					e.Floor = v
				}
				r.Deliver(now, e)
			case "config":
				s, _ := arg("threshold")
				th := threshold(s)
				r.Deliver(now, Entry{Kind: EntryConfig, Threshold: &th})
			case "vote":
				from, _ := arg("from")
				p, err := strconv.ParseUint(from, 10, 32)
				if err != nil {
					d.Fatalf(t, "from=%s: %v", from, err)
				}
				_, commit := arg("commit")
				key, _ := arg("key")
				r.Vote(now, Vote{Txn: txnID(), Partition: uint32(p), Commit: commit, Partitions: parts(), Key: key})
			case "timer":
				r.Tick(t0.Add(ms("ms")))
			case "state":
				return describeState(r)
			default:
				d.Fatalf(t, "unknown command %s", d.Cmd)
			}
			return renderReady(r.Ready()) + describeState(r)
		})
	})
}

// renderReady prints a Ready one action per line, in a fixed order.
func renderReady(rd Ready) string {
	var b strings.Builder
	for _, a := range rd.Applies {
		keys := make([]string, 0, len(a.Writes))
		for _, w := range a.Writes {
			keys = append(keys, w.Key)
		}
		fmt.Fprintf(&b, "apply %s at %d: %s\n", a.Txn, a.Index, strings.Join(keys, ","))
	}
	for _, o := range rd.Outcomes {
		s := "aborted"
		if o.Committed {
			s = "committed"
		}
		fmt.Fprintf(&b, "outcome %s %s", o.Txn, s)
		if o.Index > 0 {
			fmt.Fprintf(&b, " index=%d", o.Index)
		}
		if o.Reason != "" {
			fmt.Fprintf(&b, " (%s", o.Reason)
			if o.Key != "" {
				fmt.Fprintf(&b, " on %s", o.Key)
			}
			b.WriteString(")")
		}
		if o.Reordered {
			b.WriteString(" reordered")
		}
		b.WriteString("\n")
	}
	for _, v := range rd.Votes {
		s := "abort"
		if v.Commit {
			s = "commit"
		}
		fmt.Fprintf(&b, "vote %s p%d %s", v.Txn, v.Partition, s)
		if v.Key != "" {
			fmt.Fprintf(&b, " (%s on %s)", v.Reason, v.Key)
		}
		b.WriteString("\n")
	}
	for _, v := range rd.VoteRequests {
		fmt.Fprintf(&b, "ask p%d for its vote on %s\n", v.Partition, v.Txn)
	}
	for _, a := range rd.AbortRequests {
		fmt.Fprintf(&b, "ask p%d's log to abort %s\n", a.Partition, a.Txn)
	}
	return b.String()
}

// describeState prints the counters and the pending list.
func describeState(r *Replica) string {
	var items []string
	for _, p := range r.pl {
		if p.global {
			var got []string
			for _, pid := range p.part.Partitions {
				if _, ok := p.votes[pid]; ok {
					got = append(got, fmt.Sprint("p", pid))
				}
			}
			items = append(items, fmt.Sprintf("%s(g rt=%d votes=%s)", p.part.ID, p.rt, strings.Join(got, "+")))
		} else {
			items = append(items, fmt.Sprintf("%s(l)", p.part.ID))
		}
	}
	var waiting []string
	for _, e := range r.waiting {
		if e.Txn != nil {
			waiting = append(waiting, e.Txn.ID.String())
		} else {
			waiting = append(waiting, "entry")
		}
	}
	s := fmt.Sprintf("DC=%d TC=%d SC=%d pending=[%s]", r.dc, r.tc, r.sc, strings.Join(items, " "))
	if len(waiting) > 0 {
		s += fmt.Sprintf(" waiting=[%s]", strings.Join(waiting, " "))
	}
	return s + "\n"
}
