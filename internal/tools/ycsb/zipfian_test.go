package ycsb

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 12345)) }

// ζ(10^10, 0.99) from our exact head + Euler–Maclaurin tail agrees with YCSB's precomputed
// ScrambledZipfianGenerator.ZETAN (a plain 10^10-term float sum).
func TestZetaMatchesYCSBZetan(t *testing.T) {
	got := zeta(ScrambledItemCount, DefaultZipfianConstant)
	t.Logf("zeta(1e10, 0.99) = %.16g, YCSB ZETAN = %.16g", got, ScrambledZetan)
	if rel := math.Abs(got-ScrambledZetan) / ScrambledZetan; rel > 1e-7 {
		t.Fatalf("zeta(1e10, 0.99) = %.15g, YCSB ZETAN = %.15g (relative error %g)", got, ScrambledZetan, rel)
	}
}

func TestZetaTailMatchesExactSum(t *testing.T) {
	for _, theta := range []float64{0.5, 0.99, 1.5, 4} {
		exact := zetaRange(0, 1_500_000, theta, 0)
		approx := zetaRange(0, 500_000, theta, 0) + zetaTail(500_001, 1_500_000, theta)
		// The 1.5·10^6-term float sum itself carries ~1e-13 of rounding.
		if rel := math.Abs(exact-approx) / exact; rel > 1e-11 {
			t.Errorf("θ=%v: exact %.17g, head+tail %.17g (relative %g)", theta, exact, approx, rel)
		}
		// Incremental extension (what the latest distribution does) equals a fresh sum.
		inc := zetaRange(1_000_000, 1_500_000, theta, zetaRange(0, 1_000_000, theta, 0))
		if rel := math.Abs(exact-inc) / exact; rel > 1e-11 {
			t.Errorf("θ=%v: incremental ζ %.17g != %.17g", theta, inc, exact)
		}
	}
}

func TestZipfianRankFrequencies(t *testing.T) {
	const items, draws = 10_000, 1_000_000
	z := NewZipfian(0, items-1, 0.99)
	r := newRand(1)
	counts := make([]int, items)
	for range draws {
		v := z.Next(r)
		if v >= items {
			t.Fatalf("draw %d out of [0,%d]", v, items-1)
		}
		counts[v]++
	}
	// P(rank k) ∝ 1/(k+1)^0.99: item 0 vs item 9 is 10^0.99.
	want := math.Pow(10, 0.99)
	got := float64(counts[0]) / float64(counts[9])
	if math.Abs(got-want)/want > 0.15 {
		t.Errorf("count[0]/count[9] = %d/%d = %.3f, want 10^0.99 = %.3f ± 15%%", counts[0], counts[9], got, want)
	}
	if got, want := float64(counts[0])/float64(counts[1]), math.Pow(2, 0.99); math.Abs(got-want)/want > 0.05 {
		t.Errorf("count[0]/count[1] = %.3f, want 2^0.99 = %.3f", got, want)
	}
	if got, want := float64(counts[0])/draws, 1/zeta(items, 0.99); math.Abs(got-want)/want > 0.02 {
		t.Errorf("P(item 0) = %.4f, want 1/ζ(n) = %.4f", got, want)
	}
	for k := 1; k < 10; k++ {
		if counts[k] >= counts[k-1] {
			t.Errorf("count[%d] = %d ≥ count[%d] = %d: top ranks should decrease", k, counts[k], k-1, counts[k-1])
		}
	}
}

func TestZipfianRangeAndConstants(t *testing.T) {
	r := newRand(2)
	for _, c := range []struct {
		min, max uint64
		theta    float64
	}{
		{0, 0, 0.99}, {5, 5, 0.99}, {5, 6, 0.99}, {5, 7, 0.99}, {1, 100, 0.99}, {1000, 1999, 0.5},
		{0, 999, 4}, {0, 999, 1.5}, {0, 1 << 30, 0.99}, {math.MaxUint64 - 10, math.MaxUint64 - 1, 0.99},
	} {
		z := NewZipfian(c.min, c.max, c.theta)
		seen := map[uint64]bool{}
		for range 20000 {
			v := z.Next(r)
			if v < c.min || v > c.max {
				t.Fatalf("Zipfian(%d,%d,%v) drew %d", c.min, c.max, c.theta, v)
			}
			seen[v] = true
		}
		if !seen[c.min] {
			t.Errorf("Zipfian(%d,%d,%v) never drew its most popular item", c.min, c.max, c.theta)
		}
		if c.max-c.min == 1 && !seen[c.max] {
			t.Errorf("Zipfian(%d,%d,%v) never drew its second item", c.min, c.max, c.theta)
		}
	}
	// θ = 4 (GlobLease's skew): item 0 has probability 1/ζ(n,4) ≈ 0.924, exactly.
	z := NewZipfian(0, 9999, 4)
	n0 := 0
	for range 200000 {
		if z.Next(r) == 0 {
			n0++
		}
	}
	if got, want := float64(n0)/200000, 1/zeta(10000, 4); math.Abs(got-want) > 0.005 {
		t.Errorf("θ=4: P(item 0) = %.4f, want %.4f", got, want)
	}
}

func TestZipfianRejectsBadArguments(t *testing.T) {
	for name, f := range map[string]func(){
		"max<min":        func() { NewZipfian(5, 4, 0.99) },
		"theta=1":        func() { NewZipfian(0, 10, 1) },
		"theta=0":        func() { NewZipfian(0, 10, 0) },
		"theta=NaN":      func() { NewZipfian(0, 10, math.NaN()) },
		"theta>max":      func() { NewZipfian(0, 10, 11) },
		"all 2^64":       func() { NewZipfian(0, math.MaxUint64, 0.99) },
		"scrambled m<n":  func() { NewScrambledZipfian(5, 4) },
		"scrambled θ=1":  func() { NewScrambledZipfianConstant(0, 4, 1) },
		"uniform ub<lb":  func() { NewUniform(5, 4) },
		"hotspot all 64": func() { NewHotspot(0, math.MaxUint64, 0.2, 0.8) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func TestScrambledZipfian(t *testing.T) {
	const n, draws = 1000, 500_000
	for _, min := range []uint64{0, 100} {
		s := NewScrambledZipfian(min, min+n-1)
		r := newRand(3)
		counts := make(map[uint64]int)
		for range draws {
			v := s.Next(r)
			if v < min || v > min+n-1 {
				t.Fatalf("ScrambledZipfian(%d,%d) drew %d", min, min+n-1, v)
			}
			counts[v]++
		}
		keys := make([]uint64, 0, len(counts))
		for k := range counts {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b uint64) int { return counts[b] - counts[a] })
		// The most popular key is zipfian rank 0 hashed: min + fnvhash64(0) % n.
		if want := min + FNVHash64(0)%n; keys[0] != want {
			t.Errorf("most popular key %d (count %d), want min+fnvhash64(0)%%n = %d", keys[0], counts[keys[0]], want)
		}
		top := slices.Clone(keys[:10])
		slices.Sort(top)
		if top[9]-top[0] < 100 {
			t.Errorf("top 10 keys %v are clustered; scrambling should spread them", top)
		}
		// Skew survives the scrambling: the top key is far above the 1/n average.
		if counts[keys[0]] < 10*draws/n {
			t.Errorf("top key drawn %d times of %d, not skewed", counts[keys[0]], draws)
		}
	}
	// Another constant recomputes ζ over the 10^10+1 items instead of using ZETAN.
	s := NewScrambledZipfianConstant(0, 99, 0.9)
	r := newRand(4)
	for range 10000 {
		if v := s.Next(r); v > 99 {
			t.Fatalf("ScrambledZipfian(0,99,0.9) drew %d", v)
		}
	}
}

func TestHotspot(t *testing.T) {
	const draws = 1_000_000
	h := NewHotspot(0, 9999, 0.2, 0.8)
	r := newRand(5)
	hot := 0
	var buckets [10]int
	for range draws {
		v := h.Next(r)
		if v > 9999 {
			t.Fatalf("hotspot drew %d", v)
		}
		if v < 2000 {
			hot++
		}
		buckets[v/1000]++
	}
	if got := float64(hot) / draws; math.Abs(got-0.8) > 0.005 {
		t.Errorf("%.4f of draws in the hot 20%%, want 0.8", got)
	}
	// Uniform within each set: hot buckets get 0.4 each, cold ones 0.025.
	for i, c := range buckets {
		want := 0.025
		if i < 2 {
			want = 0.4
		}
		if got := float64(c) / draws; math.Abs(got-want)/want > 0.05 {
			t.Errorf("bucket %d: %.4f of draws, want %.4f", i, got, want)
		}
	}
	// YCSB's leniency: swapped bounds are swapped back; a fraction out of range becomes 0.
	h = NewHotspot(9999, 0, 0.2, 1.5)
	for range 10000 {
		if v := h.Next(r); v < 2000 || v > 9999 {
			t.Fatalf("hotspot with opn fraction 0 drew %d from the hot set", v)
		}
	}
	// Empty hot set: every draw is cold instead of YCSB's division by zero.
	h = NewHotspot(10, 19, 0.01, 0.8)
	for range 1000 {
		if v := h.Next(r); v < 10 || v > 19 {
			t.Fatalf("drew %d", v)
		}
	}
}

func TestUniform(t *testing.T) {
	u := NewUniform(100, 1099)
	r := newRand(6)
	var buckets [10]int
	for range 1_000_000 {
		v := u.Next(r)
		if v < 100 || v > 1099 {
			t.Fatalf("uniform drew %d", v)
		}
		buckets[(v-100)/100]++
	}
	for i, c := range buckets {
		if math.Abs(float64(c)-100_000)/100_000 > 0.02 {
			t.Errorf("bucket %d: %d draws, want ~100000", i, c)
		}
	}
	if v := NewUniform(7, 7).Next(r); v != 7 {
		t.Errorf("Uniform(7,7) drew %d", v)
	}
	NewUniform(0, math.MaxUint64).Next(r) // full range must not panic
}

func TestSkewedLatest(t *testing.T) {
	c := NewAckCounter(1000) // loaded records 0..999
	g := NewSkewedLatest(c)
	r := newRand(7)
	check := func(draws int) map[uint64]int {
		last := uint64(c.Last())
		counts := map[uint64]int{}
		for range draws {
			v := g.Next(r)
			if v > last {
				t.Fatalf("latest drew %d > last acknowledged %d", v, last)
			}
			if v == 0 {
				t.Fatalf("latest drew 0; YCSB's SkewedLatest never does once last ≥ 1")
			}
			counts[v]++
		}
		newest := 0
		for k := last - 9; k <= last; k++ {
			newest += counts[k]
		}
		// The 10 newest of ~1000 keys take ζ(10)/ζ(n) ≈ 37% of draws under θ=0.99.
		if frac := float64(newest) / float64(draws); frac < 0.3 {
			t.Errorf("last=%d: only %.3f of draws among the 10 newest keys", last, frac)
		}
		best := uint64(0)
		for k, n := range counts {
			if n > counts[best] {
				best = k
			}
		}
		if best != last {
			t.Errorf("most drawn key %d, want the newest %d", best, last)
		}
		return counts
	}
	check(200_000)

	// Inserts: issued but unacknowledged keys are never drawn; acknowledged ones become the
	// newest.
	var pending []uint64
	for range 500 {
		pending = append(pending, c.Next())
	}
	check(50_000) // still ≤ 999
	for _, v := range pending[:250] {
		c.Acknowledge(v)
	}
	if c.Last() != 1249 {
		t.Fatalf("Last = %d after acknowledging 1000..1249", c.Last())
	}
	check(50_000)
	for _, v := range pending[250:] {
		c.Acknowledge(v)
	}
	check(50_000)

	// Nothing loaded beyond record 0: only 0 exists.
	g0 := NewSkewedLatest(NewAckCounter(1))
	if v := g0.Next(r); v != 0 {
		t.Fatalf("latest over one record drew %d", v)
	}
}
