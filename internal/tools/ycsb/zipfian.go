package ycsb

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
)

const (
	// DefaultZipfianConstant is YCSB's ZipfianGenerator.ZIPFIAN_CONSTANT.
	DefaultZipfianConstant = 0.99

	// ScrambledItemCount is YCSB's ScrambledZipfianGenerator.ITEM_COUNT: the scrambled
	// generator draws a zipfian rank over this many items (10^10) and hashes it into the key
	// range. (Some YCSB revisions carry 10^16 here with the same ZETAN, which is only
	// consistent with 10^10: ζ(10^10, 0.99) ≈ 26.469, ζ(10^16, 0.99) ≈ 45.1.)
	ScrambledItemCount = 10_000_000_000

	// ScrambledZetan is YCSB's ScrambledZipfianGenerator.ZETAN, ζ(ITEM_COUNT, 0.99) precomputed
	// so that no generator sums 10^10 terms.
	ScrambledZetan = 26.46902820178302

	// MaxZipfianConstant bounds the zipfian constant accepted here. YCSB uses 0.99; GlobLease
	// (Liu's thesis, Table 4.2) ran a modified YCSB with exponent 4. Gray et al.'s method works
	// for any θ ≠ 1 (θ = 1 is a pole of α = 1/(1-θ)); above 10 the (n/2)^(θ-1) terms over the
	// 10^10 scrambled items approach float64's range.
	MaxZipfianConstant = 10.0
)

// NumberGenerator is the YCSB NumberGenerator reduced to what the workload needs: the next
// value, drawn with the caller's random source.
type NumberGenerator interface {
	Next(r *rand.Rand) uint64
}

// checkZipfianConstant reports whether theta is usable by Gray et al.'s algorithm.
func checkZipfianConstant(theta float64) error {
	if math.IsNaN(theta) || theta <= 0 || theta == 1 || theta > MaxZipfianConstant {
		return fmt.Errorf("zipfian constant %v out of range (0,1) ∪ (1,%v] (YCSB default %v)",
			theta, MaxZipfianConstant, DefaultZipfianConstant)
	}
	return nil
}

// ---------------------------------------------------------------------------------------------
// ζ(n, θ) = Σ_{i=1..n} i^-θ.

// exactZetaTerms is how many terms of a ζ sum are added one by one, as YCSB's
// ZipfianGenerator.zetastatic does; a longer sum adds the rest by Euler–Maclaurin (below).
const exactZetaTerms = 1 << 20

// zetaRange is YCSB's ZipfianGenerator.zetastatic(st, n, theta, initialsum): initial plus
// Σ_{i=st..n-1} 1/(i+1)^θ. Up to exactZetaTerms terms it is YCSB's loop; past that the tail
// beyond the first exactZetaTerms terms is the Euler–Maclaurin sum (zetaTail), whose error
// is far below float64 rounding at that distance, where YCSB's loop would take minutes.
func zetaRange(st, n uint64, theta, initial float64) float64 {
	if n <= st {
		return initial
	}
	head := n
	if n-st > exactZetaTerms {
		head = st + exactZetaTerms
	}
	sum := initial
	for i := st; i < head; i++ {
		sum += 1 / math.Pow(float64(i+1), theta)
	}
	if head < n {
		sum += zetaTail(head+1, n, theta)
	}
	return sum
}

// zetaTail is Σ_{i=a..b} i^-θ by Euler–Maclaurin: ∫_a^b x^-θ dx + (f(a)+f(b))/2
// + B2/2!·(f1(b)-f1(a)) + B4/4!·(f3(b)-f3(a)), f1 and f3 the first and third derivatives.
// For a > 2^20 the next term is below 1e-35.
func zetaTail(a, b uint64, theta float64) float64 {
	fa, fb := float64(a), float64(b)
	// b^(1-θ) - a^(1-θ) = a^(1-θ)·expm1((1-θ)·ln(b/a)), without the cancellation.
	integral := math.Pow(fa, 1-theta) * math.Expm1((1-theta)*math.Log(fb/fa)) / (1 - theta)
	f := func(x float64) float64 { return math.Pow(x, -theta) }
	d1 := func(x float64) float64 { return -theta * math.Pow(x, -theta-1) }
	d3 := func(x float64) float64 { return -theta * (theta + 1) * (theta + 2) * math.Pow(x, -theta-3) }
	return integral + (f(fa)+f(fb))/2 + (d1(fb)-d1(fa))/12 - (d3(fb)-d3(fa))/720
}

// zeta is ζ(n, θ), memoised for large n so that many generators (and many Shared values with
// the same parameters) pay for a long sum once.
func zeta(n uint64, theta float64) float64 {
	if n < 1<<16 {
		return zetaRange(0, n, theta, 0)
	}
	zetaCache.Lock()
	defer zetaCache.Unlock()
	k := zetaKey{n, theta}
	if v, ok := zetaCache.m[k]; ok {
		return v
	}
	v := zetaRange(0, n, theta, 0)
	if zetaCache.m == nil || len(zetaCache.m) >= 64 {
		zetaCache.m = make(map[zetaKey]float64)
	}
	zetaCache.m[k] = v
	return v
}

type zetaKey struct {
	n     uint64
	theta float64
}

var zetaCache struct {
	sync.Mutex
	m map[zetaKey]float64
}

// javaLong is Java's (long) cast of a double: NaN → 0, saturating at the int64 bounds.
func javaLong(f float64) int64 {
	switch {
	case f != f:
		return 0
	case f >= 9.223372036854775807e18:
		return math.MaxInt64
	case f <= -9.223372036854775808e18:
		return math.MinInt64
	}
	return int64(f)
}

// ---------------------------------------------------------------------------------------------

// Zipfian is YCSB's ZipfianGenerator: items min..max drawn with P(min+k) ∝ 1/(k+1)^θ, so min
// is the most popular, min+1 the next, and so on, using the algorithm of Gray et al.,
// "Quickly Generating Billion-Record Synthetic Databases", SIGMOD 1994. ζ(n, θ) is computed
// once, at construction.
//
// Next only reads the generator, so one Zipfian may be shared by goroutines that each pass
// their own *rand.Rand. (The item count changes only inside [SkewedLatest], which keeps its
// own copy.)
type Zipfian struct {
	base, items  uint64
	theta, alpha float64
	zetan, eta   float64
	zeta2theta   float64
	// firstTwo is 1 + 0.5^θ, the bound below which nextLong returns min+1, hoisted out of it.
	firstTwo     float64
	countForZeta uint64
}

// NewZipfian is YCSB's ZipfianGenerator(min, max, zipfianconstant): items min..max inclusive.
// It panics if max < min, if the range holds all 2^64 values, or if constant is outside
// (0,1) ∪ (1, MaxZipfianConstant].
func NewZipfian(min, max uint64, constant float64) *Zipfian {
	if max < min || max-min == math.MaxUint64 {
		panic(fmt.Sprintf("ycsb: NewZipfian(%d, %d): need min ≤ max and fewer than 2^64 items", min, max))
	}
	if err := checkZipfianConstant(constant); err != nil {
		panic("ycsb: NewZipfian: " + err.Error())
	}
	items := max - min + 1
	return newZipfianZeta(min, items, constant, zeta(items, constant))
}

// newZipfianZeta is ZipfianGenerator(min, max, zipfianconstant, zetan) with items = max-min+1.
func newZipfianZeta(base, items uint64, theta, zetan float64) *Zipfian {
	z := &Zipfian{base: base, items: items, theta: theta, zetan: zetan, countForZeta: items}
	z.zeta2theta = zetaRange(0, 2, theta, 0)
	z.alpha = 1 / (1 - theta)
	z.eta = (1 - math.Pow(2/float64(items), 1-theta)) / (1 - z.zeta2theta/zetan)
	z.firstTwo = 1 + math.Pow(0.5, theta)
	return z
}

// Next is ZipfianGenerator.nextValue(): an item in [min, max].
func (z *Zipfian) Next(r *rand.Rand) uint64 {
	return z.draw(r, z.items)
}

// Items is the number of items, max-min+1.
func (z *Zipfian) Items() uint64 { return z.items }

// nextN is ZipfianGenerator.nextLong(itemcount) for a count that only grows (YCSB's default
// allowitemcountdecrease=false): ζ is extended incrementally to the new count. Like YCSB, eta
// is then recomputed from the constructor's item count, not the new one; we keep that so that
// the "latest" distribution matches YCSB's.
func (z *Zipfian) nextN(r *rand.Rand, itemcount uint64) uint64 {
	if itemcount > z.countForZeta {
		z.zetan = zetaRange(z.countForZeta, itemcount, z.theta, z.zetan)
		z.countForZeta = itemcount
		z.eta = (1 - math.Pow(2/float64(z.items), 1-z.theta)) / (1 - z.zeta2theta/z.zetan)
	}
	return z.draw(r, itemcount)
}

// draw is the body of ZipfianGenerator.nextLong (Gray et al.).
func (z *Zipfian) draw(r *rand.Rand, itemcount uint64) uint64 {
	u := r.Float64()
	uz := u * z.zetan
	if uz < 1.0 || itemcount < 2 {
		return z.base
	}
	if uz < z.firstTwo {
		return z.base + 1
	}
	ret := javaLong(float64(itemcount) * math.Pow(z.eta*u-z.eta+1, z.alpha))
	// Gray's formula stays below itemcount in exact arithmetic; clamp float rounding (and the
	// NaN a degenerate eta gives) into range, where YCSB could return itemcount itself.
	if ret < 0 {
		ret = 0
	} else if uint64(ret) >= itemcount {
		ret = int64(itemcount - 1)
	}
	return z.base + uint64(ret)
}

// ---------------------------------------------------------------------------------------------

// ScrambledZipfian is YCSB's ScrambledZipfianGenerator: a zipfian rank over ScrambledItemCount
// items, hashed with FNVHash64 into min..max, so the popular items are scattered across the
// range instead of clustered at min. Its Next only reads the generator (see [Zipfian]).
type ScrambledZipfian struct {
	min, itemcount uint64
	gen            *Zipfian
}

// NewScrambledZipfian is YCSB's ScrambledZipfianGenerator(min, max): zipfian constant 0.99 and
// the precomputed ScrambledZetan. It panics if max < min or the range holds all 2^64 values.
func NewScrambledZipfian(min, max uint64) *ScrambledZipfian {
	return NewScrambledZipfianConstant(min, max, DefaultZipfianConstant)
}

// NewScrambledZipfianConstant is ScrambledZipfianGenerator(min, max, zipfianconstant). For
// 0.99 it uses YCSB's precomputed ZETAN; for another constant YCSB sums ζ over 10^10+1 items
// (minutes), while this computes the same sum term by term for 2^20 terms plus an Euler–Maclaurin
// tail (milliseconds, memoised).
func NewScrambledZipfianConstant(min, max uint64, constant float64) *ScrambledZipfian {
	if max < min || max-min == math.MaxUint64 {
		panic(fmt.Sprintf("ycsb: NewScrambledZipfian(%d, %d): need min ≤ max and fewer than 2^64 items", min, max))
	}
	if err := checkZipfianConstant(constant); err != nil {
		panic("ycsb: NewScrambledZipfian: " + err.Error())
	}
	// YCSB: new ZipfianGenerator(0, ITEM_COUNT, ...) — i.e. ITEM_COUNT+1 items, 0..ITEM_COUNT.
	var zetan float64
	if constant == DefaultZipfianConstant {
		zetan = ScrambledZetan
	} else {
		zetan = zeta(ScrambledItemCount+1, constant)
	}
	return &ScrambledZipfian{
		min:       min,
		itemcount: max - min + 1,
		gen:       newZipfianZeta(0, ScrambledItemCount+1, constant, zetan),
	}
}

// Next is ScrambledZipfianGenerator.nextValue(): min + fnvhash64(zipfian rank) % itemcount.
func (s *ScrambledZipfian) Next(r *rand.Rand) uint64 {
	return s.min + FNVHash64(s.gen.Next(r))%s.itemcount
}

// ---------------------------------------------------------------------------------------------

// SkewedLatest is YCSB's SkewedLatestGenerator: favours the most recently acknowledged insert.
// With max the counter's highest acknowledged value, Next returns max - zipfian(max), i.e. max
// most often, then max-1, and so on; like YCSB it never returns 0 once max ≥ 1 (the zipfian
// draw over max items is at most max-1). The zipfian's ζ grows incrementally with the counter,
// so a SkewedLatest is not safe for concurrent use: one per client.
type SkewedLatest struct {
	basis *AckCounter
	zipf  Zipfian
}

// NewSkewedLatest is YCSB's SkewedLatestGenerator(basis) with zipfian constant 0.99.
func NewSkewedLatest(counter *AckCounter) *SkewedLatest {
	return newSkewedLatest(counter, DefaultZipfianConstant)
}

func newSkewedLatest(counter *AckCounter, theta float64) *SkewedLatest {
	// YCSB: new ZipfianGenerator(basis.lastValue()) — lastValue() items, 0..lastValue()-1.
	items := uint64(max(counter.Last(), 0))
	return &SkewedLatest{basis: counter, zipf: *newZipfianZeta(0, items, theta, zeta(items, theta))}
}

// clone returns an independent copy sharing the counter (for one more client).
func (g *SkewedLatest) clone() *SkewedLatest {
	c := *g
	return &c
}

// Next is SkewedLatestGenerator.nextValue(). It returns 0 while nothing above 0 is
// acknowledged.
func (g *SkewedLatest) Next(r *rand.Rand) uint64 {
	last := g.basis.Last()
	if last <= 0 {
		return 0
	}
	m := uint64(last)
	return m - g.zipf.nextN(r, m)
}

// ---------------------------------------------------------------------------------------------

// Uniform is YCSB's UniformLongGenerator: uniform over [lb, ub] inclusive. Its Next only reads
// the generator.
type Uniform struct {
	lb, interval uint64 // interval 0 means all 2^64 values
}

// NewUniform is UniformLongGenerator(lb, ub). It panics if ub < lb.
func NewUniform(lb, ub uint64) *Uniform {
	if ub < lb {
		panic(fmt.Sprintf("ycsb: NewUniform(%d, %d): need lb ≤ ub", lb, ub))
	}
	return &Uniform{lb: lb, interval: ub - lb + 1}
}

// Next returns a value in [lb, ub]. (YCSB takes Math.abs(nextLong()) % interval, slightly
// biased toward small values; Uint64N is exactly uniform.)
func (u *Uniform) Next(r *rand.Rand) uint64 {
	if u.interval == 0 {
		return r.Uint64()
	}
	return u.lb + r.Uint64N(u.interval)
}

// ---------------------------------------------------------------------------------------------

// Hotspot is YCSB's HotspotIntegerGenerator: a fraction hotOpnFraction of draws fall uniformly
// in the hot set, the first hotsetFraction of [lower, upper]; the rest fall uniformly in the
// cold set after it. Its Next only reads the generator.
type Hotspot struct {
	lower, hotInterval, coldInterval uint64
	hotOpnFraction                   float64
}

// NewHotspot is HotspotIntegerGenerator(lowerBound, upperBound, hotsetFraction,
// hotOpnFraction), with YCSB's leniency: a fraction outside [0,1] becomes 0 and swapped bounds
// are swapped back ([Workload.Validate] rejects both instead). The hot set has
// ⌊(upper-lower+1)·hotsetFraction⌋ items. It panics if the range holds all 2^64 values.
func NewHotspot(lower, upper uint64, hotsetFraction, hotOpnFraction float64) *Hotspot {
	if !(hotsetFraction >= 0 && hotsetFraction <= 1) {
		hotsetFraction = 0
	}
	if !(hotOpnFraction >= 0 && hotOpnFraction <= 1) {
		hotOpnFraction = 0
	}
	if lower > upper {
		lower, upper = upper, lower
	}
	if upper-lower == math.MaxUint64 {
		panic("ycsb: NewHotspot: the range must hold fewer than 2^64 values")
	}
	interval := upper - lower + 1
	hot := uint64(float64(interval) * hotsetFraction)
	if hot > interval {
		hot = interval
	}
	return &Hotspot{lower: lower, hotInterval: hot, coldInterval: interval - hot, hotOpnFraction: hotOpnFraction}
}

// Next is HotspotIntegerGenerator.nextValue(). Where YCSB would divide by an empty hot or cold
// set (an ArithmeticException), this draws from the other set.
func (h *Hotspot) Next(r *rand.Rand) uint64 {
	if (r.Float64() < h.hotOpnFraction && h.hotInterval > 0) || h.coldInterval == 0 {
		return h.lower + r.Uint64N(h.hotInterval)
	}
	return h.lower + h.hotInterval + r.Uint64N(h.coldInterval)
}
