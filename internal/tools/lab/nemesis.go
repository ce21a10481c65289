//go:build linux

package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"

	"meridian/client"
	"meridian/internal/engine"
	"meridian/internal/hlc"
	"meridian/internal/tools/bench"
	"meridian/internal/tools/check"
	"meridian/internal/tools/lab/wan"
)

// Nemesis scenarios (issue 7, item 5), in the spirit of Jepsen's nemeses: each injects real
// faults into the lab while clients in every region run a register workload whose every
// response is recorded; the history is then checked with the simulator's checkers.
const (
	ScenarioKill        = "kill"         // kill -9 a node, restart it on its data
	ScenarioPartition   = "partition"    // cut a region off from the rest, heal
	ScenarioOneWay      = "one-way"      // a region's outgoing packets are dropped, incoming arrive
	ScenarioClockWithin = "clock-within" // a node's clock offset and drift stay within ε
	ScenarioClockBeyond = "clock-beyond" // a node's clock jumps far beyond ε and drifts
)

// Scenarios lists every scenario in the order `all` runs them.
var Scenarios = []string{ScenarioKill, ScenarioPartition, ScenarioOneWay, ScenarioClockWithin, ScenarioClockBeyond}

// NemesisOptions configure a nemesis run.
type NemesisOptions struct {
	Scenarios []string
	Configs   []bench.Config
	// Duration of each scenario's workload; faults start at a quarter and heal at three
	// quarters of it (default 20s).
	Duration         time.Duration
	ClientsPerRegion int           // default 2
	Keys             int           // registers (default 8)
	OpTimeout        time.Duration // default 3s: an op with no answer by then is indeterminate
	// HistoryDir receives each run's history as JSON (optional).
	HistoryDir string
	Seed       uint64
	Log        io.Writer
}

// NemesisResult is one (scenario, configuration) run.
type NemesisResult struct {
	Scenario      string         `json:"scenario"`
	Config        string         `json:"config"`
	Faults        []string       `json:"faults"`
	Ops           int            `json:"ops"`
	OK            int            `json:"ok"`
	Failed        int            `json:"failed"`
	Indeterminate int            `json:"indeterminate"`
	ClientErrors  map[string]int `json:"client_errors"` // by gRPC code
	// ReadPaths counts successful reads by how the node served them (quorum, local,
	// fallback, master, lease, ...): a protocol that cannot keep its guarantee under a fault
	// must show it here (engine.Protocol.ClockFallbackPath).
	ReadPaths  map[string]int `json:"read_paths"`
	Checkers   []string       `json:"checkers"`
	Violations []string       `json:"violations"`
	// LostWrites counts acknowledged writes no node returns after the faults healed (nor a
	// newer version of their key).
	LostWrites int `json:"lost_writes"`
	// WithinAssumptions is false for faults outside what the protocol promises to tolerate
	// (a clock beyond ε for clock-dependent protocols): violations there are findings, not
	// bugs.
	WithinAssumptions bool   `json:"within_assumptions"`
	History           string `json:"history,omitempty"`
}

// protocolOf returns cfg's protocol from the registry (the zero Protocol for a peer).
func protocolOf(cfg bench.Config) engine.Protocol {
	p, _ := engine.Lookup(cfg.Protocol)
	return p
}

// clockDependent reports whether cfg's correctness rests on the clock bound ε holding. A
// protocol that measures its peers' offsets and falls back when one exceeds ε does not
// count; the clock-beyond scenario checks its fallback (silentDegradation).
func clockDependent(cfg bench.Config) bool { return protocolOf(cfg).ClockDependent }

// linearizable reports whether cfg promises linearizability (checked with Porcupine).
func linearizable(cfg bench.Config) bool { return protocolOf(cfg).Linearizable }

// RunNemesis runs every scenario under every configuration on the lab's Meridian servers.
func RunNemesis(ctx context.Context, t *Target, o NemesisOptions) ([]NemesisResult, error) {
	if o.Duration <= 0 {
		o.Duration = 20 * time.Second
	}
	if o.ClientsPerRegion <= 0 {
		o.ClientsPerRegion = 2
	}
	if o.Keys <= 0 {
		o.Keys = 8
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 3 * time.Second
	}
	for _, s := range o.Scenarios {
		if !slices.Contains(Scenarios, s) {
			return nil, fmt.Errorf("lab: unknown scenario %q (%s)", s, strings.Join(Scenarios, ", "))
		}
	}
	for _, c := range o.Configs {
		if PeerRole(c.Protocol) != "" {
			return nil, fmt.Errorf("lab: the nemesis runs against Meridian's protocols, not %s", c.Protocol)
		}
	}
	var out []NemesisResult
	for _, cfg := range o.Configs {
		for _, sc := range o.Scenarios {
			if err := ctx.Err(); err != nil {
				return out, err
			}
			logf(o.Log, "nemesis %s on %s (%v) ...", sc, cfg.Label(), o.Duration)
			r, err := runScenario(ctx, t, cfg, sc, o)
			if err != nil {
				return out, fmt.Errorf("lab: nemesis %s on %s: %w", sc, cfg.Label(), err)
			}
			logf(o.Log, "  %d ops (%d ok, %d failed, %d indeterminate), violations %d, lost writes %d",
				r.Ops, r.OK, r.Failed, r.Indeterminate, len(r.Violations), r.LostWrites)
			out = append(out, *r)
		}
	}
	return out, nil
}

func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

// recorder collects the history; safe for concurrent clients.
type recorder struct {
	mu    sync.Mutex
	base  time.Time
	ops   check.History
	procs int
}

func (r *recorder) invoke(proc int, kind check.Kind, key, value, node string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := len(r.ops)
	r.ops = append(r.ops, check.Op{ID: id, Process: proc, Kind: kind, Key: key, Value: value, Node: node,
		Invoke: int64(time.Since(r.base))})
	return id
}

func (r *recorder) finish(id int, fn func(op *check.Op)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	op := &r.ops[id]
	fn(op)
	op.Return = int64(time.Since(r.base))
}

func (r *recorder) newProc() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.procs++
	return r.procs - 1
}

// outcomeOf classifies an error as the simulator does: certainly not applied (Failed) or
// unknown (Indeterminate). A gRPC Unavailable is Failed only when the node said so; a broken
// connection may have carried the request.
func outcomeOf(err error) check.Outcome {
	switch client.CodeOf(err) {
	case codes.InvalidArgument, codes.NotFound, codes.ResourceExhausted:
		return check.Failed
	case codes.Unavailable:
		msg := err.Error()
		if strings.Contains(msg, "connection refused") {
			return check.Failed // never sent
		}
		for _, transport := range []string{"connection", "transport", "EOF", "reset", "closing", "closed"} {
			if strings.Contains(msg, transport) {
				return check.Indeterminate
			}
		}
		return check.Failed
	}
	return check.Indeterminate
}

func hlcVersion(v client.Version) hlc.Version {
	return hlc.Version{WallNanos: v.WallNanos, Logical: v.Logical, NodeID: v.NodeID}
}

// runScenario runs one scenario on a fresh cluster under cfg.
func runScenario(ctx context.Context, t *Target, cfg bench.Config, scenario string, o NemesisOptions) (*NemesisResult, error) {
	sess, err := t.Prepare(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	m := t.Meridian()
	rc := wan.NewClient(RouterSocket(t.dir))
	layout := t.st.Layout
	regions := layout.Topology.Regions
	hosts := m.Hosts()
	res := &NemesisResult{Scenario: scenario, Config: cfg.Label(), ClientErrors: map[string]int{}, ReadPaths: map[string]int{},
		WithinAssumptions: !(scenario == ScenarioClockBeyond && clockDependent(cfg))}
	// The fault targets the second region and its first node (the first region is often a
	// home or a leader, which other scenarios and the simulator cover).
	victimRegion := regions[min(1, len(regions)-1)]
	victim := hosts[0]
	for _, h := range hosts {
		if h.Region == victimRegion {
			victim = h
			break
		}
	}
	eps := m.MaxClockOffset
	inject, heal := func() error { return nil }, func() error { return nil }
	switch scenario {
	case ScenarioKill:
		res.Faults = []string{"kill -9 " + victim.Name, "restart " + victim.Name}
		inject = func() error { return m.Kill(victim.Name) }
		heal = func() error { return m.Restart(ctx, victim.Name) }
	case ScenarioPartition:
		res.Faults = []string{"cut " + victimRegion + " from every other region", "heal"}
		inject = func() error { return rc.Cut(ctx, wan.CutRequest{From: victimRegion, To: "*"}) }
		heal = func() error { return rc.Heal(ctx, wan.CutRequest{All: true}) }
	case ScenarioOneWay:
		res.Faults = []string{"drop packets from " + victimRegion + " to other regions (one way)", "heal"}
		inject = func() error { return rc.Cut(ctx, wan.CutRequest{From: victimRegion, To: "*", OneWay: true}) }
		heal = func() error { return rc.Heal(ctx, wan.CutRequest{All: true}) }
	case ScenarioClockWithin:
		// ε/2 offset plus a drift that adds at most ε/4 over the fault window.
		off := eps / 2
		ppm := float64(eps/4) / float64(o.Duration/2) * 1e6
		res.Faults = []string{fmt.Sprintf("clock of %s: offset %v, drift %+.0f ppm (stays within ε=%v)", victim.Name, off, ppm, eps), "clock reset"}
		inject = func() error { return m.SetClock(ctx, victim.Name, off, ppm) }
		heal = func() error { return m.SetClock(ctx, victim.Name, 0, 0) }
	case ScenarioClockBeyond:
		off := -25 * eps
		res.Faults = []string{fmt.Sprintf("clock of %s: offset %v, drift -1000 ppm (25x beyond ε=%v)", victim.Name, off, eps), "clock reset"}
		inject = func() error { return m.SetClock(ctx, victim.Name, off, -1000) }
		heal = func() error { return m.SetClock(ctx, victim.Name, 0, 0) }
	}
	rec := &recorder{base: time.Now()}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var errMu sync.Mutex
	countErr := func(err error) {
		if wctx.Err() != nil {
			return // cut off by the end of the workload, not an error the system returned
		}
		errMu.Lock()
		res.ClientErrors[client.CodeOf(err).String()]++
		errMu.Unlock()
	}
	seq := 0
	for ri, region := range regions {
		var regionHosts []Host
		for _, h := range hosts {
			if h.Region == region {
				regionHosts = append(regionHosts, h)
			}
		}
		for ci := range o.ClientsPerRegion {
			h := regionHosts[ci%len(regionHosts)]
			c, err := m.Dial(h, region)
			if err != nil {
				stop()
				wg.Wait()
				return nil, err
			}
			seq++
			rng := rand.New(rand.NewPCG(o.Seed, uint64(seq)))
			wg.Add(1)
			go func(name string, ri, ci int) {
				defer wg.Done()
				defer c.Close()
				s := c.NewSession()
				proc := rec.newProc()
				for n := 0; wctx.Err() == nil; n++ {
					key := fmt.Sprintf("k%d", rng.IntN(o.Keys))
					octx, cancel := context.WithTimeout(wctx, o.OpTimeout)
					var opErr error
					if rng.IntN(2) == 0 {
						id := rec.invoke(proc, check.Read, key, "", name)
						r, err := s.Get(octx, "bench", []byte(key))
						rec.finish(id, func(op *check.Op) {
							if err != nil {
								op.Outcome = outcomeOf(err)
								return
							}
							op.Outcome, op.Found, op.Value, op.Version = check.OK, r.Found, string(r.Value), hlcVersion(r.Version)
						})
						if err == nil {
							errMu.Lock()
							res.ReadPaths[r.ReadPath]++
							errMu.Unlock()
						}
						opErr = err
					} else {
						value := fmt.Sprintf("r%d-c%d-%d", ri, ci, n)
						id := rec.invoke(proc, check.Write, key, value, name)
						v, err := s.Put(octx, "bench", []byte(key), []byte(value))
						rec.finish(id, func(op *check.Op) {
							if err != nil {
								op.Outcome = outcomeOf(err)
								return
							}
							op.Outcome, op.Version = check.OK, hlcVersion(v)
						})
						opErr = err
					}
					cancel()
					if opErr != nil {
						countErr(opErr)
						if outcomeOf(opErr) == check.Indeterminate {
							proc = rec.newProc() // a process is sequential; its last op may still be pending
						}
						// Back off after an error, as a real client would, so an unreachable node
						// does not turn the history into a flood of refused connections.
						sleepCtx(wctx, 100*time.Millisecond)
					}
				}
			}(h.Name, ri, ci)
		}
	}
	sleepCtx(ctx, o.Duration/4)
	if err := inject(); err != nil {
		stop()
		wg.Wait()
		return nil, fmt.Errorf("inject %s: %w", scenario, err)
	}
	sleepCtx(ctx, o.Duration/2)
	if err := heal(); err != nil {
		stop()
		wg.Wait()
		return nil, fmt.Errorf("heal %s: %w", scenario, err)
	}
	sleepCtx(ctx, o.Duration/4)
	stop()
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	// Quiesce, then read every key at every node: what the cluster holds after the faults.
	sleepCtx(ctx, 3*time.Second)
	final, err := finalStates(ctx, m, cfg, o.Keys)
	if err != nil {
		return nil, err
	}
	h := rec.ops
	for i := range h {
		if h[i].Outcome == 0 {
			h[i].Outcome = check.Indeterminate
		}
		switch h[i].Outcome {
		case check.OK:
			res.OK++
		case check.Failed:
			res.Failed++
		default:
			res.Indeterminate++
		}
	}
	res.Ops = len(h)
	res.Checkers, res.Violations, res.LostWrites = checkHistory(cfg, h, final)
	if v := silentDegradation(cfg, scenario, res.ReadPaths); v != "" {
		res.Violations = append(res.Violations, v)
	}
	if o.HistoryDir != "" {
		if err := os.MkdirAll(o.HistoryDir, 0o755); err != nil {
			return nil, err
		}
		res.History = filepath.Join(o.HistoryDir, fmt.Sprintf("%s-%s.json", scenario, strings.NewReplacer(" ", "_", "/", "-", "=", "-").Replace(cfg.Label())))
		b, _ := json.Marshal(struct {
			History check.History        `json:"history"`
			Final   []check.ReplicaState `json:"final"`
		}{h, final})
		if err := os.WriteFile(res.History, b, 0o644); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// finalStates reads every key at every node, from the node's own region: at the protocol's
// ReplicaReadLevel (the node's own replica) or, without one, through the node's read path
// (e.g. a lease or the master).
func finalStates(ctx context.Context, m *Meridian, cfg bench.Config, keys int) ([]check.ReplicaState, error) {
	var out []check.ReplicaState
	var opts []client.Option
	if l := protocolOf(cfg).ReplicaReadLevel; l != "" {
		opts = append(opts, client.Consistency(string(l)))
	}
	for _, h := range m.Hosts() {
		c, err := m.Dial(h, h.Region)
		if err != nil {
			return nil, err
		}
		for k := range keys {
			key := fmt.Sprintf("k%d", k)
			var r client.GetResult
			var err error
			for attempt := 0; attempt < 5; attempt++ {
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				r, err = c.Get(rctx, "bench", []byte(key), opts...)
				cancel()
				if err == nil {
					break
				}
				sleepCtx(ctx, time.Second)
			}
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("final read of %s at %s: %w", key, h.Name, err)
			}
			out = append(out, check.ReplicaState{Node: h.Name, Key: key, Found: r.Found, Value: string(r.Value), Version: hlcVersion(r.Version)})
		}
		c.Close()
	}
	return out, nil
}

// checkHistory runs the simulator's checkers on a lab history: sequential consistency and
// durability for every protocol, linearizability for those that promise it.
func checkHistory(cfg bench.Config, h check.History, final []check.ReplicaState) (checkers, violations []string, lost int) {
	checkers = []string{check.CheckerSequential, check.CheckerDurable}
	if linearizable(cfg) {
		checkers = append(checkers, check.CheckerLinearizable)
	}
	if err := h.Validate(); err != nil {
		return checkers, []string{"history: " + err.Error()}, lostWrites(h, final)
	}
	if v := check.SequentiallyConsistent(h); v != nil {
		violations = append(violations, v.Error())
	}
	if v := check.Durable(h, final); v != nil {
		violations = append(violations, v.Error())
	}
	if linearizable(cfg) {
		if r, v := check.Linearizable(h, 30*time.Second); r == check.Illegal && v != nil {
			violations = append(violations, v.Error())
		}
	}
	return checkers, violations, lostWrites(h, final)
}

// silentDegradation explains a run in which a protocol that cannot keep its guarantee
// under the fault kept serving as if it could: beyond ε a protocol with a clock fallback
// (engine.Protocol.ClockFallbackPath) must notice and serve reads on it. "" when the run is
// fine.
func silentDegradation(cfg bench.Config, scenario string, readPaths map[string]int) string {
	if fb := protocolOf(cfg).ClockFallbackPath; scenario == ScenarioClockBeyond && fb != "" && readPaths[fb] == 0 {
		return fmt.Sprintf("clock beyond ε, yet no read took the %s path: the node degraded silently", fb)
	}
	return ""
}

// lostWrites counts acknowledged writes that no node holds, nor a newer version of their key.
func lostWrites(h check.History, final []check.ReplicaState) int {
	lost := 0
	for _, w := range h {
		if w.Kind != check.Write || w.Outcome != check.OK {
			continue
		}
		kept := false
		for _, s := range final {
			if s.Key != w.Key {
				continue
			}
			if c := s.Version.Compare(w.Version); c > 0 || (c == 0 && s.Value == w.Value) {
				kept = true
				break
			}
		}
		if !kept {
			lost++
		}
	}
	return lost
}

// PrintNemesis prints the results table.
func PrintNemesis(w io.Writer, res []NemesisResult) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tCONFIG\tOPS\tOK\tFAILED\tINDET.\tCLIENT ERRORS\tCHECKERS\tVIOLATIONS\tLOST WRITES\tWITHIN ASSUMPTIONS")
	for _, r := range res {
		var errs []string
		for _, k := range slices.Sorted(maps.Keys(r.ClientErrors)) {
			errs = append(errs, fmt.Sprintf("%s %d", k, r.ClientErrors[k]))
		}
		if len(errs) == 0 {
			errs = []string{"-"}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%d\t%d\t%v\n", r.Scenario, r.Config, r.Ops, r.OK, r.Failed, r.Indeterminate,
			strings.Join(errs, ", "), strings.Join(r.Checkers, "+"), len(r.Violations), r.LostWrites, r.WithinAssumptions)
	}
	tw.Flush()
	for _, r := range res {
		var paths []string
		for _, k := range slices.Sorted(maps.Keys(r.ReadPaths)) {
			paths = append(paths, fmt.Sprintf("%s %d", k, r.ReadPaths[k]))
		}
		fmt.Fprintf(w, "read paths, %s under %s: %s\n", r.Config, r.Scenario, strings.Join(paths, ", "))
	}
	for _, r := range res {
		for _, v := range r.Violations {
			fmt.Fprintf(w, "\n%s under %s: %s\n", r.Config, r.Scenario, v)
		}
	}
}
