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
	lat := map[bool][]time.Duration{}
	var bytes [2]uint64
	rng := rand.New(rand.NewSource(1))
	n := 5 * int(tierLayout(100).PerChunk)
	for i := range samples {
		first := rng.Intn(n - 1000)
		tl, th := m.ts[first], m.ts[first+999]
		for k, whole := range []bool{false, true} {
			cache, err := NewCache(CacheConfig{CapacityBytes: 8 << 20})
			if err != nil {
				t.Fatal(err)
			}
			rs, err := OpenRemoteStream(ctx, model, "t", 11, RemoteOptions{Cache: cache, WholeChunk: whole, Clock: vc})
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
			lat[whole] = append(lat[whole], vc.Now().Sub(t0))
			lo, hi := m.span(tl, th)
			if res.N != hi-lo || string(res.Records) != string(m.data[lo*100:hi*100]) {
				t.Fatalf("sample %d (whole=%v): %d records, want %d", i, whole, res.N, hi-lo)
			}
			after := rs.Stats()
			if after.IndexGets != before.IndexGets {
				t.Fatalf("the search fetched index nodes after WarmIndex")
			}
			bytes[k] += after.DataBytes - before.DataBytes
		}
	}
	q := func(d []time.Duration, p float64) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[int(p*float64(len(d)-1))]
	}
	r50, w50 := q(lat[false], 0.5), q(lat[true], 0.5)
	t.Logf("ranged GETs: p50 %v, p90 %v, p99 %v, %d bytes/read", r50, q(lat[false], 0.9), q(lat[false], 0.99), bytes[0]/samples)
	t.Logf("whole-chunk GETs: p50 %v, p90 %v, p99 %v, %d bytes/read", w50, q(lat[true], 0.9), q(lat[true], 0.99), bytes[1]/samples)
	t.Logf("ranged p50 / whole p50 = %.3f", float64(r50)/float64(w50))
	if 4*r50 > w50 {
		t.Fatalf("ranged p50 %v is more than a quarter of whole-chunk p50 %v", r50, w50)
	}
}

func tierLayout(r int) Layout {
	l, _ := NewLayout(r)
	return l
}
