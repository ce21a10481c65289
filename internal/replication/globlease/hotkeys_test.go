package globlease

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// t0 is an arbitrary start time; nothing depends on the wall clock. (A function, not a
// package variable, so the tests share no state.)
func t0() time.Time { return time.Unix(1_700_000_000, 0) }

// stream is a key read at a steady rate: once every period, starting at next.
type stream struct {
	key    string
	period time.Duration
	next   time.Time
}

func every(key string, perSecond float64, from time.Time) *stream {
	return &stream{key: key, period: time.Duration(float64(time.Second) / perSecond), next: from}
}

// transitions counts, per key, how often it turned hot and cold.
type transitions struct {
	hot, cold map[string]int
}

func newTransitions() *transitions {
	return &transitions{hot: map[string]int{}, cold: map[string]int{}}
}

// drive feeds the streams to h from `from` to `to` in time order (ties: in slice order), and
// runs Update every `update` (0: never), recording transitions in tr (if not nil).
func drive(t *testing.T, h *HotKeys, streams []*stream, from, to time.Time, update time.Duration, tr *transitions) {
	t.Helper()
	nextUpdate := from.Add(update)
	// Bounded: every iteration advances one stream or the update time by a positive step,
	// and stops at `to`.
	for {
		var s *stream
		for _, c := range streams {
			if s == nil || c.next.Before(s.next) {
				s = c
			}
		}
		if update > 0 && (s == nil || !nextUpdate.After(s.next)) {
			if nextUpdate.After(to) {
				return
			}
			hot, cold := h.Update(nextUpdate)
			if tr != nil {
				for _, k := range hot {
					tr.hot[string(k)]++
				}
				for _, k := range cold {
					tr.cold[string(k)]++
				}
			}
			nextUpdate = nextUpdate.Add(update)
			continue
		}
		if s == nil || s.next.After(to) {
			return
		}
		h.Observe(s.next, []byte(s.key))
		s.next = s.next.Add(s.period)
	}
}

func strs(keys [][]byte) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = string(k)
	}
	return out
}

func TestHotKeysRateConverges(t *testing.T) {
	h := NewHotKeys(HotKeyConfig{HalfLife: 2 * time.Second, HotRate: 50})
	s := every("k", 100, t0())
	drive(t, h, []*stream{s}, t0(), t0().Add(8*time.Second), 0, nil)
	// After 4 half-lives the estimate has reached 1-2^-4 = 94% of the true rate.
	if r := h.Rate(t0().Add(8*time.Second), []byte("k")); r < 90 || r > 101 {
		t.Errorf("rate after 4 half-lives = %.2f, want ~100 (90..101)", r)
	}
	end := t0().Add(30 * time.Second)
	drive(t, h, []*stream{s}, t0(), end, 0, nil)
	if r := h.Rate(end, []byte("k")); math.Abs(r-100) > 1 {
		t.Errorf("rate after 15 half-lives = %.2f, want 100±1", r)
	}
	// The stream stops: one half-life later the rate has halved.
	r0 := h.Rate(end, []byte("k"))
	if r := h.Rate(end.Add(2*time.Second), []byte("k")); math.Abs(r-r0/2) > 1e-9 {
		t.Errorf("rate one half-life after the stream stopped = %.4f, want %.4f", r, r0/2)
	}
	if r := h.Rate(end, []byte("other")); r != 0 {
		t.Errorf("untracked rate = %v, want 0", r)
	}
	// Time running backwards does not inflate the rate.
	if r := h.Rate(end.Add(-time.Hour), []byte("k")); math.Abs(r-r0) > 1e-9 {
		t.Errorf("rate at an earlier time = %v, want %v", r, r0)
	}
}

func TestHotKeysHysteresis(t *testing.T) {
	h := NewHotKeys(HotKeyConfig{HotRate: 100}) // CoolRate defaults to 50
	tr := newTransitions()
	band := every("band", 80, t0())
	k := every("k", 150, t0())
	upd := 100 * time.Millisecond

	// 150/s turns k hot exactly once; 80/s (between CoolRate and HotRate) never turns band hot.
	at := t0().Add(20 * time.Second)
	drive(t, h, []*stream{band, k}, t0(), at, upd, tr)
	if tr.hot["k"] != 1 || tr.cold["k"] != 0 || !h.IsHot([]byte("k")) {
		t.Fatalf("k at 150/s: %d hot, %d cold transitions, IsHot=%t; want 1, 0, true", tr.hot["k"], tr.cold["k"], h.IsHot([]byte("k")))
	}

	// k drops into the band: it stays hot for a minute, no flapping.
	k.period = time.Second / 80
	next := at.Add(60 * time.Second)
	drive(t, h, []*stream{band, k}, at, next, upd, tr)
	if tr.hot["k"] != 1 || tr.cold["k"] != 0 || !h.IsHot([]byte("k")) {
		t.Fatalf("k in the band: %d hot, %d cold transitions, IsHot=%t; want 1, 0, true", tr.hot["k"], tr.cold["k"], h.IsHot([]byte("k")))
	}

	// k drops below CoolRate: it turns cold exactly once and stays cold.
	k.period = time.Second / 20
	end := next.Add(60 * time.Second)
	drive(t, h, []*stream{band, k}, next, end, upd, tr)
	if tr.hot["k"] != 1 || tr.cold["k"] != 1 || h.IsHot([]byte("k")) {
		t.Fatalf("k at 20/s: %d hot, %d cold transitions, IsHot=%t; want 1, 1, false", tr.hot["k"], tr.cold["k"], h.IsHot([]byte("k")))
	}
	if tr.hot["band"] != 0 || tr.cold["band"] != 0 {
		t.Errorf("band at 80/s: %d hot, %d cold transitions, want none", tr.hot["band"], tr.cold["band"])
	}
	if got := h.Hot(); len(got) != 0 {
		t.Errorf("Hot() = %q, want none", strs(got))
	}
}

func TestHotKeysMaxHotHighestFirst(t *testing.T) {
	h := NewHotKeys(HotKeyConfig{HotRate: 100, MaxHot: 2, Capacity: 16})
	streams := []*stream{every("a", 200, t0()), every("b", 300, t0()), every("c", 400, t0()), every("d", 500, t0()),
		every("e", 30, t0())}
	at := t0().Add(10 * time.Second)
	drive(t, h, streams, t0(), at, 0, nil)
	hot, cold := h.Update(at)
	if got, want := strs(hot), []string{"d", "c"}; !slices.Equal(got, want) || len(cold) != 0 {
		t.Fatalf("Update = hot %q cold %q, want hot %q (highest rate first) cold none", got, strs(cold), want)
	}
	if got, want := strs(h.Hot()), []string{"c", "d"}; !slices.Equal(got, want) {
		t.Fatalf("Hot() = %q, want %q (sorted by key)", got, want)
	}
	if hot, cold := h.Update(at); hot != nil || cold != nil {
		t.Fatalf("second Update at the same time = %q, %q; want no change", strs(hot), strs(cold))
	}
}

func TestHotKeysDisplacement(t *testing.T) {
	h := NewHotKeys(HotKeyConfig{HotRate: 100, MaxHot: 2, Capacity: 16})
	tr := newTransitions()
	a, b, c := every("a", 300, t0()), every("b", 400, t0()), every("c", 500, t0())
	streams := []*stream{a, b, c}
	upd := 100 * time.Millisecond
	at := t0().Add(10 * time.Second)
	drive(t, h, streams, t0(), at, upd, tr)
	if got, want := strs(h.Hot()), []string{"b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("Hot() = %q, want %q", got, want)
	}

	// c slows to 150/s: still at or above HotRate, so a (300/s, cold) may not displace it.
	c.period = time.Second / 150
	next := at.Add(20 * time.Second)
	drive(t, h, streams, at, next, upd, tr)
	if got, want := strs(h.Hot()), []string{"b", "c"}; !slices.Equal(got, want) || tr.hot["a"] != 0 {
		t.Fatalf("c at 150/s: Hot() = %q (a turned hot %d times), want %q", got, tr.hot["a"], want)
	}

	// c slows to 80/s, into the band: a displaces it, once, and c does not come back.
	c.period = time.Second / 80
	end := next.Add(60 * time.Second)
	drive(t, h, streams, next, end, upd, tr)
	if got, want := strs(h.Hot()), []string{"a", "b"}; !slices.Equal(got, want) {
		t.Fatalf("c at 80/s: Hot() = %q, want %q", got, want)
	}
	if tr.hot["a"] != 1 || tr.cold["c"] != 1 || tr.hot["c"] != 1 || tr.cold["a"] != 0 {
		t.Errorf("transitions hot %v cold %v, want a hot once, c hot once and cold once", tr.hot, tr.cold)
	}
}

func TestHotKeysEviction(t *testing.T) {
	cfg := HotKeyConfig{Capacity: 4, MaxHot: 1, HalfLife: time.Second, HotRate: 1, CoolRate: 0.01}
	h := NewHotKeys(cfg)
	observeN := func(at time.Time, key string, n int) {
		for i := 0; i < n; i++ {
			h.Observe(at, []byte(key))
		}
	}
	observeN(t0(), "a", 5)
	observeN(t0(), "b", 4)
	observeN(t0(), "c", 3)
	observeN(t0(), "d", 2)
	// e evicts the lowest entry, d, and inherits its count for eviction order only.
	buf := []byte("e")
	h.Observe(t0(), buf)
	buf[0] = 'x' // the tracker must have copied the key
	if len(h.entries) != 4 || h.Rate(t0(), []byte("d")) != 0 {
		t.Fatalf("after e: %d entries, Rate(d)=%v; want 4 entries and d evicted", len(h.entries), h.Rate(t0(), []byte("d")))
	}
	if r, want := h.Rate(t0(), []byte("e")), math.Ln2; math.Abs(r-want) > 1e-12 {
		t.Fatalf("Rate(e) = %v, want %v (its one access; the inherited count is not a rate)", r, want)
	}
	// e's estimate is 1+2 = 3, c's is 3: the tie goes to the lower key, so f evicts c.
	h.Observe(t0(), []byte("f"))
	if h.Rate(t0(), []byte("c")) != 0 || h.Rate(t0(), []byte("e")) == 0 {
		t.Fatalf("after f: Rate(c)=%v Rate(e)=%v; want c evicted, e kept", h.Rate(t0(), []byte("c")), h.Rate(t0(), []byte("e")))
	}

	// A hot key is never evicted, even once it has the lowest rate of all.
	hot, _ := h.Update(t0())
	if got := strs(hot); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("Update = %q, want [a]", got)
	}
	later := t0().Add(5 * time.Second) // a's rate: 5 ln2 / 32 ≈ 0.11, still above CoolRate
	for i := 0; i < 50; i++ {
		observeN(later, fmt.Sprintf("n%02d", i), 1+i%3)
		if len(h.entries) > cfg.Capacity {
			t.Fatalf("%d entries, want at most %d", len(h.entries), cfg.Capacity)
		}
		if !h.IsHot([]byte("a")) || h.Rate(later, []byte("a")) == 0 {
			t.Fatalf("hot key a was evicted by n%02d", i)
		}
	}
	if len(h.heap) > cfg.Capacity {
		t.Errorf("eviction heap holds %d items, want at most %d", len(h.heap), cfg.Capacity)
	}
}

// TestHotKeysNewHotKeyAmongWarmKeys: when more keys are warm than the table holds, a key
// that turns hot must still get in and stay (the space-saving inheritance at work: without
// it every newcomer is the lowest entry and is evicted before its second read).
func TestHotKeysNewHotKeyAmongWarmKeys(t *testing.T) {
	h := NewHotKeys(HotKeyConfig{Capacity: 64, MaxHot: 1, HotRate: 100})
	rng := rand.New(rand.NewPCG(1, 2))
	var becameHot []string
	// Bounded: 20 s of 1 ms ticks.
	for ms := 0; ms < 20_000; ms++ {
		now := t0().Add(time.Duration(ms) * time.Millisecond)
		// 200 warm keys at 5/s each on average, and a stream of keys read once.
		h.Observe(now, []byte(fmt.Sprintf("warm-%03d", rng.IntN(200))))
		h.Observe(now, []byte(fmt.Sprintf("once-%d", rng.Uint64())))
		if ms >= 5_000 && ms%4 == 0 {
			h.Observe(now, []byte("hot")) // 250/s from t=5s
		}
		if ms%100 == 0 {
			hot, _ := h.Update(now)
			becameHot = append(becameHot, strs(hot)...)
		}
		if len(h.entries) > 64 {
			t.Fatalf("%d entries, want at most 64", len(h.entries))
		}
	}
	if !slices.Equal(becameHot, []string{"hot"}) {
		t.Errorf("became hot: %q, want [hot]", becameHot)
	}
	if r := h.Rate(t0().Add(20*time.Second), []byte("hot")); math.Abs(r-250) > 5 {
		t.Errorf("Rate(hot) = %.1f, want ~250", r)
	}
}

func TestHotKeysTiesByKey(t *testing.T) {
	h := NewHotKeys(HotKeyConfig{HotRate: 1, MaxHot: 2, Capacity: 8})
	for _, k := range []string{"z", "m", "a"} {
		for i := 0; i < 10; i++ {
			h.Observe(t0(), []byte(k))
		}
	}
	hot, _ := h.Update(t0())
	if got, want := strs(hot), []string{"a", "m"}; !slices.Equal(got, want) {
		t.Errorf("Update with equal rates = %q, want %q (key order breaks ties)", got, want)
	}
}

// TestHotKeysDeterministic feeds the same random workload to several trackers (each map has
// its own iteration order) and requires identical results.
func TestHotKeysDeterministic(t *testing.T) {
	type step struct {
		hot, cold []string
		all       []string
	}
	run := func() []step {
		h := NewHotKeys(HotKeyConfig{Capacity: 32, MaxHot: 4, HotRate: 40, HalfLife: time.Second})
		rng := rand.New(rand.NewPCG(42, 7))
		z := rand.NewZipf(rng, 1.1, 1, 200)
		var steps []step
		// Bounded: 10 s of 1 ms ticks, 5 reads per tick.
		for ms := 0; ms < 10_000; ms++ {
			now := t0().Add(time.Duration(ms) * time.Millisecond)
			for i := 0; i < 5; i++ {
				h.Observe(now, []byte(fmt.Sprintf("k%03d", z.Uint64())))
			}
			if ms%50 == 0 {
				hot, cold := h.Update(now)
				steps = append(steps, step{hot: strs(hot), cold: strs(cold), all: strs(h.Hot())})
			}
		}
		return steps
	}
	want := run()
	transitions := 0
	for _, s := range want {
		transitions += len(s.hot) + len(s.cold)
	}
	if transitions < 4 {
		t.Fatalf("only %d transitions: the workload does not exercise the hot set", transitions)
	}
	for i := 0; i < 3; i++ {
		got := run()
		if !slices.EqualFunc(got, want, func(a, b step) bool {
			return slices.Equal(a.hot, b.hot) && slices.Equal(a.cold, b.cold) && slices.Equal(a.all, b.all)
		}) {
			t.Fatalf("run %d differs from the first run", i+2)
		}
	}
}

func TestHotKeyConfigValidate(t *testing.T) {
	var c HotKeyConfig
	c.HotRate = 10
	c.EnsureDefaults()
	if c.Capacity != 1024 || c.HalfLife != 2*time.Second || c.CoolRate != 5 || c.MaxHot != 16 {
		t.Errorf("EnsureDefaults = %+v", c)
	}
	for _, tc := range []struct {
		cfg HotKeyConfig
		ok  bool
	}{
		{HotKeyConfig{HotRate: 10}, true},
		{HotKeyConfig{HotRate: 10, CoolRate: 9.99}, true},
		{HotKeyConfig{}, false},
		{HotKeyConfig{HotRate: -1}, false},
		{HotKeyConfig{HotRate: math.NaN()}, false},
		{HotKeyConfig{HotRate: math.Inf(1)}, false},
		{HotKeyConfig{HotRate: 10, CoolRate: 10}, false},
		{HotKeyConfig{HotRate: 10, CoolRate: -1}, false},
		{HotKeyConfig{HotRate: 10, Capacity: -1}, false},
		{HotKeyConfig{HotRate: 10, HalfLife: -time.Second}, false},
		{HotKeyConfig{HotRate: 10, MaxHot: -1}, false},
		{HotKeyConfig{HotRate: 10, Capacity: 4, MaxHot: 4}, false},
		{HotKeyConfig{HotRate: 10, Capacity: 8}, false}, // default MaxHot 16 >= 8
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok=%t", tc.cfg, err, tc.ok)
		}
	}
	defer func() {
		if recover() == nil {
			t.Errorf("NewHotKeys with an invalid config did not panic")
		}
	}()
	NewHotKeys(HotKeyConfig{})
}
