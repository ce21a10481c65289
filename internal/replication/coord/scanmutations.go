package coord

import (
	"time"

	"meridian/internal/engine"
	"meridian/internal/storage"
)

// MutationScanSkipPageBoundary breaks scans on purpose (the simulator's mutation suite): a
// forward page that continues a partition's read after an earlier page was cut short loses
// its first record, while the read still resumes after the page's last key, so the key at
// each page boundary is skipped. A scan then answers a key as absent that it should have
// returned (checked as one read per key the scan covered, internal/tools/sim/scan.go).
const MutationScanSkipPageBoundary = "scan-skip-page-boundary"

// ScanMutations and ScanMutationHints are the scans' broken variants and the simulation
// settings under which they show: half of the reads are scans, every page holds one record
// (scan_page_bytes=1), so every scan of more than one key pages; the levels stay the
// protocol's (QUORUM/QUORUM), where scans, which repair what they read (scanrepair.go), are
// checked for sequential consistency as reads are. The split-scan configuration of make
// sim-ci (ONE/ALL, mayflower, fresh reads) catches it too.
// MutationScanNoRepair: scans answer without repairing what they read (scanrepair.go), as
// they did before the simulator's sequential-consistency check found that a QUORUM scan could
// return a write that reached one replica and a later read miss it.
const MutationScanNoRepair = "scan-no-repair"

var (
	ScanMutations = map[string]string{
		MutationScanNoRepair:         "scans repair nothing: a QUORUM scan may return a write only one replica holds, and a later QUORUM read miss it",
		MutationScanSkipPageBoundary: "a scan's forward page that continues a partition after a page cut short drops its first record, and the scan resumes past it (the key at each page boundary is skipped)",
	}
	ScanMutationHints = map[string]engine.SimHints{
		MutationScanSkipPageBoundary: {ScanFraction: 0.5, KeyspaceOptions: map[string]string{"scan_page_bytes": "1"}},
		MutationScanNoRepair:         {ScanFraction: 0.8, PartitionEvery: 500 * time.Millisecond, KeyspaceOptions: map[string]string{"scan_page_bytes": "1"}},
	}
)

// scanPageMutation applies MutationScanSkipPageBoundary to the records recs that round rd
// merged: a forward round of a partition that has already paged loses its first record.
func (c *Core) scanPageMutation(rd *scanRound, recs []storage.Record) []storage.Record {
	if c.Cfg.Mutation != MutationScanSkipPageBoundary || rd.reverse || !rd.part.paged || len(recs) == 0 {
		return recs
	}
	return recs[1:]
}
