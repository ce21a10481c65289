package sim

import (
	"fmt"
	"time"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/tools/check"
)

// Region loss (Options.LoseRegion): every node of one region crashes for good while the
// workload runs, and the protocol's region exclusion (config.ProtocolSpec.RegionExclusion,
// placement.Exclusion) must take the region out so that the others go on. The driver plays
// the metadata group: an engine's exclusion reports are applied to the newest map a metadata
// round trip later, and every node installs the result after its own delay.

// scheduleRegionLoss picks the region and when it is lost.
func (s *simulator) scheduleRegionLoss() error {
	if !s.o.LoseRegion {
		return nil
	}
	if spec, ok := config.Protocol(s.o.Protocol); !ok || !spec.RegionExclusion {
		return fmt.Errorf("sim: protocol %s cannot exclude a lost region (--lose-region needs one that can)", s.o.Protocol)
	}
	if len(s.o.Topology.Regions) < 2 {
		return fmt.Errorf("sim: --lose-region needs at least two regions")
	}
	d := int64(s.o.Duration)
	s.lostRegion = s.o.Topology.Regions[s.rng.IntN(len(s.o.Topology.Regions))]
	s.schedule(event{at: d/10 + s.rng.Int64N(d/4), kind: evLoseRegion})
	return nil
}

// loseRegion crashes every node of the lost region; none restarts.
func (s *simulator) loseRegion() error {
	if s.excludedRegion != "" {
		// A region was excluded already (by mistake, a partition longer than exclude_after):
		// that one is lost. Losing another would leave one region of three, which no
		// protocol owes progress, and whose stalled logs hold writes never applied.
		s.lostRegion = s.excludedRegion
	}
	s.trace("region %s is lost for good", s.lostRegion)
	s.lostAt = s.now
	for i, n := range s.nodes {
		if n.cfg.Region == s.lostRegion {
			s.lost[i] = true
			if n.up {
				n.lostEngine, _ = n.host.Engine(s.proto.Name)
			}
			if err := s.crash(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// exclusionReport schedules the metadata group's handling of an engine's exclusion report.
func (s *simulator) exclusionReport(r engine.Report) {
	if r.Keyspace != "sim" || r.Kind == engine.ReportMoveCaughtUp {
		return
	}
	s.schedule(event{at: s.now + s.rng.Int64N(int64(maxInstallDelay)+1), kind: evExclusion, report: &r})
}

// applyExclusion is exclude_start or exclude_report at the metadata group.
func (s *simulator) applyExclusion(r *engine.Report) {
	ks, _ := s.pmap.Keyspace("sim")
	// Attempts are numbered as the metadata group numbers them: by a rising index.
	s.exclusionSeq++
	next, err := ks.StartExclusion(r.Partition, r.Region, s.exclusionSeq)
	what := fmt.Sprintf("exclusion of %s from partition %d started (attempt %d)", r.Region, r.Partition, s.exclusionSeq)
	switch r.Kind {
	case engine.ReportExcludePosition:
		next, err = ks.ReportExclusion(r.Partition, r.Region, r.Round, r.Reporter, r.Position)
		what = fmt.Sprintf("%s reports cycle %d on attempt %d to exclude %s from partition %d", r.Reporter, r.Position, r.Round, r.Region, r.Partition)
	case engine.ReportExcludeCancel:
		next, err = ks.CancelExclusion(r.Partition, r.Region, r.Round)
		what = fmt.Sprintf("attempt %d to exclude %s from partition %d cancelled", r.Round, r.Region, r.Partition)
	}
	if err != nil || next == ks {
		return // another region's exclusion under way, or nothing new
	}
	if p, ok := next.Partition(r.Partition); ok && p.Exclusion.Decided() {
		what += fmt.Sprintf(": decided, from cycle %d", p.Exclusion.From)
		s.excludedAt, s.excludedRegion = s.now, p.Exclusion.Region
	}
	s.installNewest(next, what)
}

// regionLossProgress is the liveness check of a region loss: the region must have been
// excluded, and some operation started after the exclusion must have succeeded (unless
// another region had been excluded before).
func (s *simulator) regionLossProgress() *check.Violation {
	if !s.o.LoseRegion || s.lostAt == 0 {
		return nil
	}
	if s.excludedRegion != "" && s.excludedRegion != s.lostRegion {
		// Another region was excluded after the loss began (suspected while a partition
		// lasted longer than exclude_after): with two regions out, no progress is owed.
		return nil
	}
	if s.excludedAt == 0 {
		return &check.Violation{Checker: "region-exclusion", Reason: fmt.Sprintf("region %s was lost at %.3fs and never excluded (the survivors stalled to the end, %.3fs)",
			s.lostRegion, float64(s.lostAt)/1e9, float64(s.now)/1e9)}
	}
	for _, op := range s.history {
		if op.Outcome == check.OK && op.Invoke > s.excludedAt {
			return nil
		}
	}
	return &check.Violation{Checker: "region-exclusion", Reason: fmt.Sprintf("region %s was lost at %.3fs and excluded at %.3fs, but no operation started after that succeeded",
		s.lostRegion, float64(s.lostAt)/1e9, float64(s.excludedAt)/1e9)}
}

// minLossDuration is the shortest workload a region-loss run takes: the stall before the
// report (exclude_after, at least 1s) and the exclusion's rounds, then operations after it.
const minLossDuration = 10 * time.Second
