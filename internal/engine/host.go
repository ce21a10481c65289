package engine

import (
	"slices"
	"time"

	"meridian/internal/errs"
	"meridian/internal/placement"
	"meridian/internal/wire/peerpb"
)

// Host is a node's engines: one per protocol that a keyspace of the placement map uses,
// created when the first such keyspace appears. It routes a request to the engine of its
// keyspace's protocol and a peer message to the engine its Envelope names, and merges the
// engines' output into one Ready (so one synced batch covers every engine's writes). It is
// itself an Engine; the node runtime and the simulator drive a Host.
type Host struct {
	cfg   Config
	store Reader
	// onNew is told of each engine as it is created (the runtime registers its metrics).
	onNew func(p Protocol, e Engine)

	pmap    *placement.Map
	engines map[string]Engine
	order   []string // protocol names in creation order: a deterministic merge order
	out     Ready
}

// NewHost returns a host with no engines yet; SetPlacement creates them.
func NewHost(cfg Config, store Reader, onNew func(p Protocol, e Engine)) *Host {
	return &Host{cfg: cfg, store: store, onNew: onNew, engines: map[string]Engine{}}
}

// SetPlacement installs m in every engine, creating the engines of protocols that appear in
// it. A keyspace whose protocol is not registered is skipped (configuration validation
// refuses unknown protocols, so this is only a build without that protocol).
func (h *Host) SetPlacement(m *placement.Map) {
	h.pmap = m
	names := make([]string, 0, len(m.Keyspaces))
	for name := range m.Keyspaces {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		proto := m.Keyspaces[name].Spec.Protocol
		if _, ok := h.engines[proto]; ok {
			continue
		}
		p, ok := Lookup(proto)
		if !ok {
			continue
		}
		cfg := h.cfg
		e := p.New(cfg, h.store)
		h.engines[proto] = e
		h.order = append(h.order, proto)
		if h.onNew != nil {
			h.onNew(p, e)
		}
	}
	for _, proto := range h.order {
		h.engines[proto].SetPlacement(m)
	}
}

// Placement returns the installed placement map.
func (h *Host) Placement() *placement.Map { return h.pmap }

// Engine returns the node's engine of protocol name, if it has one.
func (h *Host) Engine(name string) (Engine, bool) {
	e, ok := h.engines[name]
	return e, ok
}

// Engines returns the engines in creation order with their protocols' names.
func (h *Host) Engines() (names []string, engines []Engine) {
	for _, n := range h.order {
		names = append(names, n)
		engines = append(engines, h.engines[n])
	}
	return names, engines
}

// Propose hands req to the engine of its keyspace's protocol.
func (h *Host) Propose(now time.Time, req Request) {
	ks, ok := h.pmap.Keyspace(req.Keyspace)
	if !ok {
		h.out.Replies = append(h.out.Replies, Result{ID: req.ID, Op: req.Op, Err: errs.New(errs.NotFound, "unknown keyspace %q", req.Keyspace)})
		return
	}
	e, ok := h.engines[ks.Spec.Protocol]
	if !ok {
		h.out.Replies = append(h.out.Replies, Result{ID: req.ID, Op: req.Op,
			Err: errs.New(errs.Invalid, "keyspace %q uses protocol %q, which this node does not run", req.Keyspace, ks.Spec.Protocol)})
		return
	}
	e.Propose(now, req)
}

// Step hands env to this node's engine of the sending engine's protocol; a message for a
// protocol this node does not run (yet) is dropped, as a lost message.
func (h *Host) Step(now time.Time, env *peerpb.Envelope) {
	p, ok := LookupID(env.GetEngine())
	if !ok {
		return
	}
	if e, ok := h.engines[p.Name]; ok {
		e.Step(now, env)
	}
}

// Tick advances every engine's time.
func (h *Host) Tick(now time.Time) {
	for _, n := range h.order {
		h.engines[n].Tick(now)
	}
}

// HasReady reports whether any engine (or the host itself) has output.
func (h *Host) HasReady() bool {
	if !h.out.Empty() {
		return true
	}
	for _, n := range h.order {
		if h.engines[n].HasReady() {
			return true
		}
	}
	return false
}

// Ready merges the engines' output, in creation order, stamping each message and job with
// its engine's protocol ID.
func (h *Host) Ready() Ready {
	rd := h.out
	h.out = Ready{}
	for _, n := range h.order {
		e := h.engines[n]
		if !e.HasReady() {
			continue
		}
		p, _ := Lookup(n)
		r := e.Ready()
		rd.Writes = append(rd.Writes, r.Writes...)
		rd.Raw = append(rd.Raw, r.Raw...)
		for _, env := range r.Messages {
			env.Engine = p.ID
		}
		rd.Messages = append(rd.Messages, r.Messages...)
		rd.Replies = append(rd.Replies, r.Replies...)
		for _, rr := range r.Reads {
			rd.Reads = append(rd.Reads, stampRead(rr, p.ID))
		}
		rd.Ingests = append(rd.Ingests, r.Ingests...)
		rd.Reports = append(rd.Reports, r.Reports...)
		for _, j := range r.Jobs {
			if _, ok := j.(Unpaced); ok {
				rd.Jobs = append(rd.Jobs, stampedUnpacedJob{stampedJob{id: p.ID, job: j}})
				continue
			}
			rd.Jobs = append(rd.Jobs, stampedJob{id: p.ID, job: j})
		}
	}
	return rd
}

// stampRead marks the message a read's result may become (Result.Forward) with the
// engine's protocol ID.
func stampRead(r Read, id uint32) Read {
	wrap := r.Wrap
	if wrap == nil {
		return r
	}
	r.Wrap = func(res Result) Result {
		res = wrap(res)
		if res.Forward != nil {
			res.Forward.Engine = id
		}
		return res
	}
	return r
}

// stampedUnpacedJob is a stampedJob of an Unpaced job.
type stampedUnpacedJob struct{ stampedJob }

func (stampedUnpacedJob) Unpaced() {}

// stampedJob marks the messages of an engine's job with the engine's protocol ID.
type stampedJob struct {
	id  uint32
	job Job
}

func (j stampedJob) Run(store Store, self uint32) ([]*peerpb.Envelope, error) {
	envs, err := j.job.Run(store, self)
	for _, env := range envs {
		env.Engine = j.id
	}
	return envs, err
}
