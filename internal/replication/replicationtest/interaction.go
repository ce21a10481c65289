package replicationtest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/wire"
	"meridian/internal/wire/peerpb"
)

// RunInteractions runs the protocol trace scripts in dir (in the style of etcd raft's
// interaction tests): each script proposes requests, delivers, drops and delays chosen
// messages, advances virtual time, and prints the resulting messages, replies and storage.
//
// Commands:
//
//	cluster [protocol=P (default: defaultProtocol)] [regions=3] [partitions=1] [read_level=L] [write_level=L]
//	        [lease=D] [master_lease=D] [election_timeout=D] [hot_keys=B] [auto_migrate=B]
//	put|get|delete node=N key=K [value=V] [level=L]
//	scan node=N [start=S] [end=E] [limit=L] [level=L]
//	deliver [from=N] [to=N] [type=T]   (delivers matching queued messages, in order)
//	drop [from=N] [to=N] [type=T]
//	cut from=N to=N / heal from=N to=N (heartbeats and deliveries on that link are lost)
//	tick ms=M
//	stabilize
//	pending
//	storage key=K
//
// Run with -rewrite to regenerate expected output after an intended change.
func RunInteractions(t *testing.T, dir, defaultProtocol string) {
	datadriven.Walk(t, dir, func(t *testing.T, path string) {
		var h *Harness
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "cluster" && h == nil {
				d.Fatalf(t, "no cluster yet")
			}
			arg := func(name string) (string, bool) {
				for _, a := range d.CmdArgs {
					if a.Key == name {
						if len(a.Vals) == 0 {
							return "", true
						}
						return a.Vals[0], true
					}
				}
				return "", false
			}
			num := func(name string, def int) int {
				v, ok := arg(name)
				if !ok {
					return def
				}
				n, err := strconv.Atoi(v)
				if err != nil {
					d.Fatalf(t, "%s: %v", name, err)
				}
				return n
			}
			var out strings.Builder
			var before map[*peerpb.Envelope]bool
			if h != nil {
				before = map[*peerpb.Envelope]bool{}
				for _, env := range h.Queue {
					before[env] = true
				}
			}
			printNewlyQueued := func() {
				for _, env := range h.Queue {
					if !before[env] {
						fmt.Fprintln(&out, "queued "+h.fmtEnv(env))
					}
				}
			}
			printReplies := func() {
				for _, r := range h.TakeReplies() {
					fmt.Fprintln(&out, h.fmtResult(r))
				}
			}
			switch d.Cmd {
			case "cluster":
				opts := map[string]string{}
				for _, k := range []string{"read_level", "write_level", "lease", "master_lease", "election_timeout", "hot_keys", "auto_migrate"} {
					if v, ok := arg(k); ok {
						opts[k] = v
					}
				}
				protocol := defaultProtocol
				if v, ok := arg("protocol"); ok {
					protocol = v
				}
				h = New(t, protocol, num("regions", 3), num("partitions", 1), opts)
				return "ok"
			case "put", "get", "delete", "scan":
				node := uint32(num("node", 1))
				req := engine.Request{Keyspace: "ks"}
				if v, ok := arg("level"); ok {
					req.Level = config.Level(v)
				}
				if v, ok := arg("mode"); ok {
					req.WriteMode = v
				}
				k, _ := arg("key")
				req.Key = []byte(k)
				switch d.Cmd {
				case "put":
					req.Op = engine.OpPut
					v, _ := arg("value")
					req.Value = []byte(v)
				case "get":
					req.Op = engine.OpGet
				case "delete":
					req.Op = engine.OpDelete
				case "scan":
					req.Op = engine.OpScan
					s, _ := arg("start")
					e, _ := arg("end")
					req.Start, req.End = []byte(s), []byte(e)
					if e == "" {
						req.End = nil
					}
					req.Limit = num("limit", 100)
				}
				id := h.Propose(node, req)
				fmt.Fprintf(&out, "req=%d\n", id)
				printReplies()
				printNewlyQueued()
				return out.String()
			case "deliver", "drop":
				f := match(t, d, num)
				var envs []*peerpb.Envelope
				if d.Cmd == "deliver" {
					envs = h.Deliver(f)
				} else {
					envs = h.Drop(f)
				}
				for _, env := range envs {
					fmt.Fprintln(&out, map[string]string{"deliver": "delivered ", "drop": "dropped "}[d.Cmd]+h.fmtEnv(env))
				}
				printReplies()
				return out.String()
			case "cut", "heal":
				link := [2]uint32{uint32(num("from", 0)), uint32(num("to", 0))}
				if d.Cmd == "cut" {
					h.Cut[link] = true
				} else {
					delete(h.Cut, link)
				}
				return "ok"
			case "tick":
				h.Tick(time.Duration(num("ms", 0)) * time.Millisecond)
				printReplies()
				printNewlyQueued()
				if out.Len() == 0 {
					return "ok"
				}
				return out.String()
			case "stabilize":
				n := h.Stabilize()
				fmt.Fprintf(&out, "delivered %d messages\n", n)
				printReplies()
				return out.String()
			case "pending":
				for _, env := range h.Queue {
					fmt.Fprintln(&out, h.fmtEnv(env))
				}
				if out.Len() == 0 {
					return "none"
				}
				return out.String()
			case "storage":
				k, _ := arg("key")
				nw := h.Newest(k)
				for _, id := range h.IDs {
					rec, ok := nw[id]
					switch {
					case !ok:
						fmt.Fprintf(&out, "n%d: -\n", id)
					case rec.Tombstone:
						fmt.Fprintf(&out, "n%d: <tombstone> v=%s\n", id, h.fmtVersion(rec.Version))
					default:
						fmt.Fprintf(&out, "n%d: %s v=%s\n", id, rec.Value, h.fmtVersion(rec.Version))
					}
				}
				return out.String()
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}

func match(t *testing.T, d *datadriven.TestData, num func(string, int) int) func(*peerpb.Envelope) bool {
	from, to := uint32(num("from", 0)), uint32(num("to", 0))
	typ := ""
	for _, a := range d.CmdArgs {
		if a.Key == "type" && len(a.Vals) > 0 {
			typ = a.Vals[0]
		}
	}
	return func(env *peerpb.Envelope) bool {
		if from != 0 && env.From != from {
			return false
		}
		if to != 0 && env.To != to {
			return false
		}
		if typ != "" && wire.MessageType(env) != typ {
			return false
		}
		return true
	}
}
