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
	// exclusions are the exclusion proposals in flight (handleExclusionReport).
	exclusions map[exclusionKey]bool
}

// handleReports acts on an engine's reports (called by the committer, which must not block).
func (n *Node) handleReports(reports []engine.Report) {
	for _, r := range reports {
		if r.Kind == engine.ReportExcludeStart || r.Kind == engine.ReportExcludePosition || r.Kind == engine.ReportExcludeCancel {
			n.handleExclusionReport(r)
			continue
		}
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

// handleExclusionReport proposes an engine's exclusion report (engine.ReportExcludeStart,
// ReportExcludePosition) to the metadata group, one proposal per partition and kind at a
// time: the engine repeats its reports, so a lost or refused one is made again.
func (n *Node) handleExclusionReport(r engine.Report) {
	cmd := metadata.Command{Op: metadata.OpExcludeStart, Name: r.Keyspace, Partition: r.Partition, Region: r.Region, Round: r.Round}
	switch r.Kind {
	case engine.ReportExcludePosition:
		cmd.Op, cmd.Reporter, cmd.Position = metadata.OpExcludeReport, r.Reporter, r.Position
	case engine.ReportExcludeCancel:
		cmd.Op = metadata.OpExcludeCancel
	}
	key := exclusionKey{keyspace: r.Keyspace, partition: r.Partition, op: cmd.Op}
	n.moves.mu.Lock()
	if n.moves.exclusions == nil {
		n.moves.exclusions = map[exclusionKey]bool{}
	}
	busy := n.moves.exclusions[key]
	n.moves.exclusions[key] = true
	n.moves.mu.Unlock()
	if busy {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer func() {
			n.moves.mu.Lock()
			delete(n.moves.exclusions, key)
			n.moves.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), moveFinishTimeout)
		defer cancel()
		_, _, err := n.metaCommand(ctx, cmd, moveFinishTimeout, false)
		switch {
		case err == nil:
			n.log.Warn("region exclusion", "op", cmd.Op, "keyspace", r.Keyspace, "partition", r.Partition, "region", r.Region, "reporter", r.Reporter, "position", r.Position)
		case errs.KindOf(err) == errs.Conflict:
			// Another region's exclusion under way, or this one decided meanwhile.
		default:
			n.log.Warn("could not propose a region exclusion step yet; the engine reports it again", "op", cmd.Op, "keyspace", r.Keyspace, "partition", r.Partition, "region", r.Region, "err", err)
		}
	}()
}

type exclusionKey struct {
	keyspace  string
	partition uint32
	op        string
}
