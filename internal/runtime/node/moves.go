package node

import (
	"context"
	"sync"
	"time"

	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/metadata"
)

// Replica moves as the node runtime sees them (docs/elasticity.md). The engines do the data
// movement; what they cannot do, being sans-IO, is change the cluster metadata. An engine
// reports a move's new replica caught up (engine.ReportMoveCaughtUp, repeated while the move
// lasts), and the node proposes move_finish: conditional on the move's ID, so a report of a
// move that was aborted or has finished meanwhile changes nothing.

// moveFinishTimeout bounds one move_finish proposal.
const moveFinishTimeout = 10 * time.Second

// moveReports tracks the move_finish proposals in flight (one per move).
type moveReports struct {
	mu       sync.Mutex
	inflight map[uint64]bool
}

// handleReports acts on an engine's reports (called by the committer, which must not block).
func (n *Node) handleReports(reports []engine.Report) {
	for _, r := range reports {
		if r.Kind != engine.ReportMoveCaughtUp {
			continue
		}
		n.moves.mu.Lock()
		if n.moves.inflight == nil {
			n.moves.inflight = map[uint64]bool{}
		}
		busy := n.moves.inflight[r.MoveID]
		n.moves.inflight[r.MoveID] = true
		n.moves.mu.Unlock()
		if busy {
			continue
		}
		n.wg.Add(1)
		go func(r engine.Report) {
			defer n.wg.Done()
			defer func() {
				n.moves.mu.Lock()
				delete(n.moves.inflight, r.MoveID)
				n.moves.mu.Unlock()
			}()
			ctx, cancel := context.WithTimeout(context.Background(), moveFinishTimeout)
			defer cancel()
			_, _, err := n.metaCommand(ctx, metadata.Command{Op: metadata.OpMoveFinish, Name: r.Keyspace, Partition: r.Partition, MoveID: r.MoveID}, moveFinishTimeout, false)
			switch {
			case err == nil:
				n.m.movesFinished.Inc()
				n.log.Info("replica move finished", "keyspace", r.Keyspace, "partition", r.Partition, "move", r.MoveID)
			case errs.KindOf(err) == errs.Conflict:
				// Finished (by an earlier report) or aborted meanwhile.
			default:
				n.log.Warn("could not finish a replica move yet; the new replica reports again", "keyspace", r.Keyspace, "partition", r.Partition, "move", r.MoveID, "err", err)
			}
		}(r)
	}
}
