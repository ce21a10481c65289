package catenae

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	core "meridian/internal/catenae"
	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/placement"
)

// ID is the catenae engine's ID on the wire (Envelope.engine).
const ID = 6

func init() {
	engine.Register(engine.Protocol{
		Name:  config.ProtocolCatenae,
		ID:    ID,
		New:   func(cfg engine.Config, store engine.Reader) engine.Engine { return New(cfg, store) },
		Check: check,
		// The protocol's broken variants are the core's (internal/catenae); the transaction
		// simulator (meridian sim txn --mode catenae --mutations) catches each.
		Mutations:     core.Mutations,
		NoPointLevels: "catenae keyspaces take transactions (TxnRead, TxnCommit) and gets at the validated prefix, with no consistency level",
		NotKeyValue:   "its clients run transactions, not gets and puts: meridian sim txn --mode catenae simulates it (every fault, the serializability checker, its mutations), meridian bench catenae measures it against sdur and 2pc (TPC-C and the SDUR microbenchmark)",
		Metrics: func(reg prometheus.Registerer, e engine.Engine) {
			registerMetrics(reg, e.(*Engine))
		},
	})
}

// check validates a request on a catenae keyspace: gets (no level), transactional reads and
// commits; a commit's reads carry the versions they read (each becomes an OpExpect).
func check(ks *placement.Keyspace, req *engine.Request, level string) error {
	if level != "" {
		return errs.New(errs.Invalid, "keyspace %q (catenae) takes no consistency level: every read is at the validated prefix, every commit serializable", ks.Spec.Name)
	}
	if req.WriteMode != "" {
		return errs.New(errs.Invalid, "write_mode %q is not valid for keyspace %q: protocol catenae has no write modes", req.WriteMode, ks.Spec.Name)
	}
	switch req.Op {
	case engine.OpGet, engine.OpTxnRead:
		return nil
	case engine.OpTxnCommit:
		if t := req.Txn; t != nil && len(t.Reads) > 0 && len(t.ReadVersions) != len(t.Reads) {
			return errs.New(errs.Invalid, "keyspace %q (catenae) checks each key a transaction read by the version it read: send read_versions, one per read (the versions TxnRead returned)", ks.Spec.Name)
		}
		return nil
	case engine.OpScan:
		return errs.New(errs.Invalid, "keyspace %q (catenae) serves Get, TxnRead and TxnCommit; it has no scans (a chainable transaction names its keys before it runs, liu-thesis 1.5)", ks.Spec.Name)
	}
	return errs.New(errs.Invalid, "keyspace %q (catenae) serves Get, TxnRead and TxnCommit, not %s", ks.Spec.Name, req.Op)
}

// registerMetrics exports the engine's counters.
func registerMetrics(reg prometheus.Registerer, e *Engine) {
	byName := e.stats.byName()
	for _, name := range counterNames {
		c := byName[name]
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "meridian_catenae_" + name + "_total",
			Help: "Catenae engine: " + strings.ReplaceAll(name, "_", " ") + " (internal/replication/catenae).",
		}, func() float64 { return float64(c.Load()) }))
	}
}
