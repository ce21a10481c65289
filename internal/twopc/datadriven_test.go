package twopc

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestTraces replays scripted traces of one replica of partition 0 (testdata/*.txt):
//
//	replica [leader]
//	prepare index=I txn=N.S parts=P,Q coord=C [reads=k@v,…] [writes=k,…]
//	decision index=I txn=N.S commit|abort parts=P,Q coord=C
//	vote txn=N.S from=P commit|abort coord=C
//	decided txn=N.S commit|abort parts=P,Q coord=C          (a Decide from the coordinator)
//	status txn=N.S parts=P,Q coord=C                         (a participant's status request)
//	timer ms=N
func TestTraces(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var r *Replica
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			arg := func(key string) (string, bool) {
				for _, a := range d.CmdArgs {
					if a.Key == key {
						return strings.Join(a.Vals, ","), true
					}
				}
				return "", false
			}
			u64 := func(key string) uint64 {
				s, _ := arg(key)
				v, err := strconv.ParseUint(s, 10, 64)
				if err != nil {
					d.Fatalf(t, "%s=%s: %v", key, s, err)
				}
				return v
			}
			id := func() TxnID {
				s, _ := arg("txn")
				n, q, ok := strings.Cut(s, ".")
				a, err1 := strconv.ParseUint(n, 10, 32)
				b, err2 := strconv.ParseUint(q, 10, 64)
				if !ok || err1 != nil || err2 != nil {
					d.Fatalf(t, "txn=%s: want N.S", s)
				}
				return TxnID{uint32(a), b}
			}
			parts := func() []uint32 {
				s, _ := arg("parts")
				var out []uint32
				for _, f := range strings.Split(s, ",") {
					v, err := strconv.ParseUint(f, 10, 32)
					if err != nil {
						d.Fatalf(t, "parts=%s: %v", s, err)
					}
					out = append(out, uint32(v))
				}
				return out
			}
			_, commit := arg("commit")
			if d.Cmd != "replica" && r == nil {
				d.Fatalf(t, "%s before replica", d.Cmd)
			}
			switch d.Cmd {
			case "replica":
				r, _ = NewReplica(0, Options{})
				_, leader := arg("leader")
				r.SetLeader(leader)
				return "ok"
			case "prepare":
				p := &Part{ID: id(), Partition: 0, Partitions: parts(), Coordinator: uint32(u64("coord")), Submitter: 9}
				if s, ok := arg("reads"); ok {
					for _, kv := range strings.Split(s, ",") {
						k, v, _ := strings.Cut(kv, "@")
						n, err := strconv.ParseUint(v, 10, 64)
						if err != nil {
							d.Fatalf(t, "reads=%s: %v", s, err)
						}
						p.Reads = append(p.Reads, Read{Key: k, Version: n})
					}
				}
				if s, ok := arg("writes"); ok {
					for _, k := range strings.Split(s, ",") {
						p.Writes = append(p.Writes, Write{Key: k, Value: []byte(k)})
					}
				}
				r.Deliver(t0, u64("index"), Entry{Kind: EntryPrepare, Part: p})
			case "decision":
				r.Deliver(t0, u64("index"), Entry{Kind: EntryDecision, Txn: id(), Commit: commit, Partitions: parts(), Coordinator: uint32(u64("coord")), Submitter: 9})
			case "vote":
				r.Vote(t0, Vote{Txn: id(), Partition: uint32(u64("from")), Coordinator: uint32(u64("coord")), Commit: commit})
			case "decided":
				r.Decided(t0, Decide{Txn: id(), Commit: commit, Partitions: parts(), Coordinator: uint32(u64("coord")), Submitter: 9})
			case "status":
				r.Status(t0, StatusRequest{Txn: id(), Coordinator: uint32(u64("coord")), Partitions: parts(), Submitter: 9})
			case "timer":
				r.Tick(t0.Add(timeMs(u64("ms"))))
			default:
				d.Fatalf(t, "unknown command %s", d.Cmd)
			}
			return render(r)
		})
	})
}

func render(r *Replica) string {
	rd := r.Ready()
	var b strings.Builder
	for _, a := range rd.Applies {
		var keys []string
		for _, w := range a.Writes {
			keys = append(keys, w.Key)
		}
		fmt.Fprintf(&b, "apply %s at %d: %s\n", a.Txn, a.Version, strings.Join(keys, ","))
	}
	for _, o := range rd.Outcomes {
		fmt.Fprintf(&b, "outcome %s committed=%v", o.Txn, o.Committed)
		if o.Key != "" {
			fmt.Fprintf(&b, " (%s on %s)", o.Reason, o.Key)
		}
		b.WriteString("\n")
	}
	for _, v := range rd.Votes {
		fmt.Fprintf(&b, "vote %s p%d→coordinator p%d commit=%v", v.Txn, v.Partition, v.Coordinator, v.Commit)
		if v.Key != "" {
			fmt.Fprintf(&b, " (on %s)", v.Key)
		}
		b.WriteString("\n")
	}
	for _, e := range rd.Proposals {
		fmt.Fprintf(&b, "propose decision %s commit=%v\n", e.Txn, e.Commit)
	}
	for _, dd := range rd.Decides {
		fmt.Fprintf(&b, "tell participants %v: %s commit=%v\n", dd.Partitions, dd.Txn, dd.Commit)
	}
	for _, s := range rd.StatusRequests {
		fmt.Fprintf(&b, "ask coordinator p%d about %s\n", s.Coordinator, s.Txn)
	}
	fmt.Fprintf(&b, "version=%d pending=%d\n", r.Version(), r.PendingCount())
	return b.String()
}
