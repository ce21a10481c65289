package metadata

import (
	"encoding/json"

	"github.com/prometheus/client_golang/prometheus"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/placement"
	"meridian/internal/replication/raft"
)

// ID is the metadata group's engine ID on the wire (Envelope.engine).
const ID = 5

func init() {
	engine.Register(engine.Protocol{
		Name: config.ProtocolMetadata,
		ID:   ID,
		New: func(cfg engine.Config, store engine.Reader) engine.Engine {
			return raft.New(cfg, store, raft.Options{Protocol: config.ProtocolMetadata,
				StateMachine: func(string) raft.StateMachine { return newStateMachine(cfg) }})
		},
		Check:            check,
		Linearizable:     true,
		ReadLevel:        config.LevelLinearizable,
		ReplicaReadLevel: config.LevelStale,
		Metrics: func(reg prometheus.Registerer, e engine.Engine) {
			raft.RegisterMetrics(reg, config.ProtocolMetadata, e.(*raft.Engine).Counters())
		},
		ClockFallbackPath: raft.PathReadIndex,
		// The metadata group is a Raft group: Raft's broken variants are its own.
		Mutations: raft.Mutations,
		Sim: engine.SimSupport{
			DescribeMessage: raft.DescribeMessage,
			KeyspaceOptions: map[string]string{"heartbeat_interval": "100ms", "election_timeout": "500ms", "log_retain": "10"},
			// Two nodes per region with one voter each: half the nodes follow as learners.
			NodesPerRegion: 2,
			Partitions:     1,
			NewWorkload:    newSimWorkload,
			MutationHints:  raft.MutationHints(),
		},
	})
}

// check validates a request on the metadata keyspace: commands (keyspace changes) and
// reads of its records (LINEARIZABLE or STALE).
func check(ks *placement.Keyspace, req *engine.Request, level string) error {
	switch req.Op {
	case engine.OpCommand:
		if level != "" {
			return errs.New(errs.Invalid, "metadata commands take no consistency level")
		}
		return nil
	case engine.OpGet, engine.OpScan:
		return raft.CheckReadLevel(ks, req, level)
	}
	return errs.New(errs.Invalid, "keyspace %q holds the cluster metadata: it is changed by keyspace commands only", ks.Spec.Name)
}

func encodeOutcome(o Outcome) []byte {
	b, _ := json.Marshal(o)
	return b
}
