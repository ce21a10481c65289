package wan

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestPolicyTraces replays the router's decisions from testdata: each trace sets up hosts
// and links and routes packets at given times (ms since the trace's start), printing each
// verdict and release time. The policy is deterministic for a seed, so traces are exact.
//
//	hosts seed=N           one host per line: NAME REGION ADDR (default links: 50 ms between
//	                       regions, 0.25 ms within one)
//	link from=I to=J [delay=MS] [jitter=MS] [loss=PCT] [bw=MBPS]
//	cut from=I to=J | heal from=I to=J
//	route at=MS src=I dst=J [size=BYTES] [count=N]
func TestPolicyTraces(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var p *Policy
		t0 := time.Unix(1000, 0)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			intArg := func(key string, def int) int {
				if !d.HasArg(key) {
					return def
				}
				var v int
				d.ScanArgs(t, key, &v)
				return v
			}
			floatArg := func(key string, def float64) float64 {
				if !d.HasArg(key) {
					return def
				}
				var s string
				d.ScanArgs(t, key, &s)
				var v float64
				if _, err := fmt.Sscan(s, &v); err != nil {
					d.Fatalf(t, "%s=%s: %v", key, s, err)
				}
				return v
			}
			switch d.Cmd {
			case "hosts":
				var hs []Host
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					f := strings.Fields(line)
					if len(f) != 3 {
						d.Fatalf(t, "host line %q: want NAME REGION ADDR", line)
					}
					hs = append(hs, Host{Name: f[0], Region: f[1], Addr: netip.MustParseAddr(f[2])})
				}
				var err error
				p, err = NewPolicy(hs, regionDelay, uint64(intArg("seed", 1)))
				if err != nil {
					return "error: " + err.Error()
				}
				return fmt.Sprintf("%d hosts", len(hs))
			case "link":
				src, dst := intArg("from", 0), intArg("to", 0)
				l := p.Link(src, dst)
				l.DelayMs = floatArg("delay", l.DelayMs)
				l.JitterMs = floatArg("jitter", l.JitterMs)
				l.LossPct = floatArg("loss", l.LossPct)
				l.BandwidthMbps = floatArg("bw", l.BandwidthMbps)
				if err := p.SetLink(src, dst, l); err != nil {
					return "error: " + err.Error()
				}
				return "ok"
			case "cut", "heal":
				p.SetCut(intArg("from", 0), intArg("to", 0), d.Cmd == "cut")
				return "ok"
			case "route":
				at := t0.Add(time.Duration(floatArg("at", 0) * float64(time.Millisecond)))
				var out strings.Builder
				for range intArg("count", 1) {
					rel, v := p.Route(at, intArg("src", 0), intArg("dst", 0), intArg("size", 100))
					if v == Forward {
						fmt.Fprintf(&out, "%s release=%.3fms (held %.3fms)\n", v, float64(rel.Sub(t0).Microseconds())/1000, float64(rel.Sub(at).Microseconds())/1000)
					} else {
						fmt.Fprintf(&out, "%s\n", v)
					}
				}
				return out.String()
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}
