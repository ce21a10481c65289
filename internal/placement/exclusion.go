package placement

import (
	"fmt"
	"maps"
	"slices"
)

// Exclusion takes a lost region's replicas out of a partition whose protocol stalls without
// them (Canopus: a lost super-leaf stalls every cycle, thesis 4.4; docs/canopus.md,
// "Exclusion of a lost region"). It is decided by the metadata group in two steps:
//
//  1. A replica that has waited too long for the region suspects it (StartExclusion): one
//     exclusion per partition at a time, so two sides of a partition cannot exclude each
//     other.
//  2. Every other region of the partition freezes what it holds of the region's state and
//     reports the first position (a Canopus cycle) it does not hold (ReportExclusion). Once
//     every other region has reported, From is the highest report: the region is out from
//     there on. The protocol's own rule (a region commits a position only once every other
//     region holds its state of it) makes every position the region committed lower.
//
// A pending exclusion may be cancelled (CancelExclusion): a region suspected by mistake (a
// passing partition) is taken back, and one whose reports cannot all come (another region
// lost too) does not block the partition's next exclusion. Each attempt has its own Round, so
// a late report of a cancelled attempt counts for nothing.
//
// A region once excluded stays out of the partition: readmitting it needs a state transfer.
type Exclusion struct {
	Region string `json:"region"`
	// Round identifies the attempt: the metadata index of its exclude_start.
	Round uint64 `json:"round"`
	// Reports are the positions the other regions reported, by region.
	Reports map[string]uint64 `json:"reports,omitempty"`
	// From is the first position without the region (0: pending, reports still missing).
	From uint64 `json:"from,omitempty"`
}

// Decided reports whether the exclusion is in force.
func (e *Exclusion) Decided() bool { return e != nil && e.From > 0 }

// maxExclusionPosition bounds a reported position (a corrupt or hostile report).
const maxExclusionPosition = 1 << 62

// StartExclusion returns a copy of k in which partition id's replicas of region are being
// excluded. Starting the exclusion already under way is a no-op (every replica that waits
// reports it); another region's is refused.
func (k *Keyspace) StartExclusion(id uint32, region string, round uint64) (*Keyspace, error) {
	i := k.indexOf(id)
	if i < 0 {
		return nil, fmt.Errorf("keyspace %q has no partition %d", k.Spec.Name, id)
	}
	if !slices.Contains(k.Spec.Regions, region) {
		return nil, fmt.Errorf("keyspace %q has no replicas in region %q (regions %v)", k.Spec.Name, region, k.Spec.Regions)
	}
	if len(k.Spec.Regions) < 2 {
		return nil, fmt.Errorf("keyspace %q has one region: excluding it would leave no replica", k.Spec.Name)
	}
	p := &k.Partitions[i]
	if ex := p.Exclusion; ex != nil {
		if ex.Region == region {
			return k, nil
		}
		return nil, fmt.Errorf("partition %d of %q is already excluding region %q; one region at a time", id, k.Spec.Name, ex.Region)
	}
	if round <= p.ExclusionCancelled {
		return nil, fmt.Errorf("exclusion round %d: want above the last cancelled one, %d (the exclude_start's metadata index)", round, p.ExclusionCancelled)
	}
	out := k.clone()
	out.Partitions[i].Exclusion = &Exclusion{Region: region, Round: round, Reports: map[string]uint64{}}
	return out.Index(), nil
}

// CancelExclusion returns a copy of k without partition id's pending exclusion of region
// attempt round; a decided exclusion, or another attempt, is not cancelled (an error).
func (k *Keyspace) CancelExclusion(id uint32, region string, round uint64) (*Keyspace, error) {
	i := k.indexOf(id)
	if i < 0 {
		return nil, fmt.Errorf("keyspace %q has no partition %d", k.Spec.Name, id)
	}
	ex := k.Partitions[i].Exclusion
	switch {
	case ex == nil || ex.Region != region || ex.Round != round:
		return nil, fmt.Errorf("partition %d of %q has no attempt %d to exclude region %q", id, k.Spec.Name, round, region)
	case ex.Decided():
		return nil, fmt.Errorf("partition %d of %q excluded region %q from position %d already", id, k.Spec.Name, region, ex.From)
	}
	out := k.clone()
	out.Partitions[i].Exclusion = nil
	out.Partitions[i].ExclusionCancelled = round
	return out.Index(), nil
}

// ReportExclusion returns a copy of k with reporter's position for the exclusion of region
// from partition id; the exclusion is decided once every other region has reported. A
// region's first report counts (its replicas derive the same position from the same logs).
func (k *Keyspace) ReportExclusion(id uint32, region string, round uint64, reporter string, position uint64) (*Keyspace, error) {
	i := k.indexOf(id)
	if i < 0 {
		return nil, fmt.Errorf("keyspace %q has no partition %d", k.Spec.Name, id)
	}
	ex := k.Partitions[i].Exclusion
	switch {
	case ex == nil || ex.Region != region || ex.Round != round:
		return nil, fmt.Errorf("partition %d of %q has no attempt %d to exclude region %q", id, k.Spec.Name, round, region)
	case reporter == region || !slices.Contains(k.Spec.Regions, reporter):
		return nil, fmt.Errorf("region %q cannot report on the exclusion of %q from partition %d of %q", reporter, region, id, k.Spec.Name)
	case position == 0 || position > maxExclusionPosition:
		return nil, fmt.Errorf("exclusion report position %d: want in [1, 2^62]", position)
	}
	if ex.Decided() || ex.Reports[reporter] != 0 {
		return k, nil
	}
	out := k.clone()
	nx := out.Partitions[i].Exclusion
	nx.Reports[reporter] = position
	if len(nx.Reports) == len(k.Spec.Regions)-1 {
		nx.From = slices.Max(slices.Collect(maps.Values(nx.Reports)))
	}
	return out.Index(), nil
}

func cloneExclusion(e *Exclusion) *Exclusion {
	if e == nil {
		return nil
	}
	out := *e
	out.Reports = maps.Clone(e.Reports)
	if out.Reports == nil {
		out.Reports = map[string]uint64{}
	}
	return &out
}
