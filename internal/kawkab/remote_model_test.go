package kawkab

import (
	"context"
	"math/rand"
	"slices"
	"testing"
	"time"
)

// TestRemoteHistoricalReadModel measures historical reads at a node other than the primary
// (5.7.5, Fig. 5.12) under the S3 model (DefaultS3Model on a VirtualClock: modelled time, no
// wall clock): 1,000-record range reads (R = 100, 7 blocks) of a cold cache — the index
// warmed, as a node keeps its small index nodes — with ranged GETs (DefaultRemoteRangeBlocks
// per GET, in parallel) and with whole-chunk GETs. The goal: the ranged p50 at most a quarter
// of the whole-chunk p50. Run it alone with
//
//	go test -tags pebblegozstd -run TestRemoteHistoricalReadModel -v ./internal/kawkab/
func TestRemoteHistoricalReadModel(t *testing.T) {
	if testing.Short() {
		t.Skip("a measurement")
	}
	_, _, m, obj, _ := remoteFixture(t, Config{}) // the default index: k = 3, n = 289
	vc := NewVirtualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	model := &ModelledObjectStore{Inner: obj.ObjectStore, Model: DefaultS3Model(), Clock: vc}
	ctx := context.Background()
	const samples = 200
	type mode struct {
		name        string
		whole       bool
		rangeBlocks int
	}
	modes := []mode{{"ranged, 16 blocks per GET (default)", false, 0}, {"ranged, 4 blocks per GET", false, 4}, {"whole chunk", true, 0}}
	lat := make([][]time.Duration, len(modes))
	bytes := make([]uint64, len(modes))
	gets := make([]uint64, len(modes))
	rng := rand.New(rand.NewSource(1))
	n := 5 * int(tierLayout(100).PerChunk)
	for i := range samples {
		first := rng.Intn(n - 1000)
		tl, th := m.ts[first], m.ts[first+999]
		for k, md := range modes {
			cache, err := NewCache(CacheConfig{CapacityBytes: 8 << 20})
			if err != nil {
				t.Fatal(err)
			}
			rs, err := OpenRemoteStream(ctx, model, "t", 11, RemoteOptions{Cache: cache, WholeChunk: md.whole, RangeBlocks: md.rangeBlocks, Clock: vc})
			if err != nil {
				t.Fatal(err)
			}
			if err := rs.WarmIndex(ctx); err != nil {
				t.Fatal(err)
			}
			before := rs.Stats()
			t0 := vc.Now()
			res, err := rs.ReadRange(tl, th)
			if err != nil {
				t.Fatal(err)
			}
			lat[k] = append(lat[k], vc.Now().Sub(t0))
			lo, hi := m.span(tl, th)
			if res.N != hi-lo || string(res.Records) != string(m.data[lo*100:hi*100]) {
				t.Fatalf("sample %d (%s): %d records, want %d", i, md.name, res.N, hi-lo)
			}
			after := rs.Stats()
			if after.IndexGets != before.IndexGets {
				t.Fatalf("the search fetched index nodes after WarmIndex")
			}
			bytes[k] += after.DataBytes - before.DataBytes
			gets[k] += after.DataGets - before.DataGets
		}
	}
	q := func(d []time.Duration, p float64) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[int(p*float64(len(d)-1))]
	}
	for k, md := range modes {
		t.Logf("%s: p50 %v, p90 %v, p99 %v; %.2f GETs, %d bytes per read", md.name,
			q(lat[k], 0.5), q(lat[k], 0.9), q(lat[k], 0.99), float64(gets[k])/samples, bytes[k]/samples)
	}
	r50, w50 := q(lat[0], 0.5), q(lat[2], 0.5)
	t.Logf("ranged (default) p50 / whole-chunk p50 = %.3f", float64(r50)/float64(w50))
	if 4*r50 > w50 {
		t.Fatalf("ranged p50 %v is more than a quarter of whole-chunk p50 %v", r50, w50)
	}
}

func tierLayout(r int) Layout {
	l, _ := NewLayout(r)
	return l
}
