package tpcc

import (
	"math/rand/v2"
	"testing"
)

func TestMixAndRemoteShares(t *testing.T) {
	g := &Gen{Regions: 3, PerRegion: 2}
	rng := rand.New(rand.NewPCG(1, 2))
	counts := map[string]int{}
	remote := map[string]int{}
	for i := range 20000 {
		tx := g.Next(1, i%7, rng.IntN)
		counts[tx.Kind]++
		if tx.Remote {
			remote[tx.Kind]++
		}
		for _, a := range tx.Adds {
			if w := Warehouse(a.Key); w < 0 || w >= 6 {
				t.Fatalf("key %q: warehouse %d", a.Key, w)
			}
		}
		if w := Warehouse(tx.Adds[0].Key); tx.Kind == "payment" && w/2 != 1 {
			t.Fatalf("payment at warehouse %d from region 1", w)
		}
	}
	if p := float64(remote["payment"]) / float64(counts["payment"]); p < 0.12 || p > 0.18 {
		t.Errorf("remote payments %.3f, want about 0.15", p)
	}
	// 5-15 lines at 1% each: about 10% of new orders touch a remote warehouse.
	if p := float64(remote["new-order"]) / float64(counts["new-order"]); p < 0.05 || p > 0.15 {
		t.Errorf("remote new orders %.3f, want about 0.1", p)
	}
	if Warehouse("i42/price") != -1 || Warehouse("s13/7/quantity") != 13 {
		t.Error("Warehouse parses keys wrong")
	}
}
