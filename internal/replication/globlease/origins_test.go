package globlease

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// masteredIn returns a masterRegion function that answers region for every key.
func masteredIn(region string) func([]byte) string {
	return func([]byte) string { return region }
}

// writeLoop writes key once per step from `from` (inclusive) to `to` (exclusive), from the
// region regionAt(i) of the i-th write, and after each write asks for candidates under
// master. It returns the time of the first candidate for key (zero if none) and that move.
func writeLoop(o *Origins, key string, from, to time.Time, step time.Duration, regionAt func(i int) string,
	master func([]byte) string) (first time.Time, move Move) {
	i := 0
	// Bounded: the time advances by step > 0 up to `to`.
	for now := from; now.Before(to); now = now.Add(step) {
		o.Observe(now, []byte(key), regionAt(i))
		i++
		if c := o.Candidates(now, master, 10); len(c) > 0 && first.IsZero() {
			first, move = now, c[0]
		}
	}
	return first, move
}

// pattern returns the region of the i-th write from a repeating list.
func pattern(regions ...string) func(int) string {
	return func(i int) string { return regions[i%len(regions)] }
}

func TestOriginsDominantRegionAfterHold(t *testing.T) {
	o := NewOrigins(MigrationPolicy{})
	step := 100 * time.Millisecond
	// 90% of the writes from B (9 of every 10), the master is in A.
	first, move := writeLoop(o, "k", t0(), t0().Add(20*time.Second), step,
		pattern("B", "B", "B", "B", "B", "B", "B", "B", "B", "A"), masteredIn("A"))
	if first.IsZero() {
		t.Fatalf("90%% from B: never a candidate")
	}
	// B has held the share since the first write (t0); MinWrites is reached after 0.5 s.
	if d := first.Sub(t0()); d < DefaultHold || d > DefaultHold+step {
		t.Errorf("first candidate after %s, want after Hold %s (within one step)", d, DefaultHold)
	}
	if string(move.Key) != "k" || move.To != "B" || move.Share < 0.85 || move.Share > 0.95 {
		t.Errorf("move = %+v, want k to B with share ~0.9", move)
	}
	// No move when the master is already where the writes come from.
	if c := o.Candidates(t0().Add(20*time.Second), masteredIn("B"), 10); len(c) != 0 {
		t.Errorf("candidates with the master in B: %+v, want none", c)
	}
}

func TestOriginsSplitNeverMoves(t *testing.T) {
	o := NewOrigins(MigrationPolicy{})
	first, move := writeLoop(o, "k", t0(), t0().Add(5*time.Minute), 100*time.Millisecond,
		pattern("B", "A", "B", "A", "B", "B", "A", "B", "A", "B"), masteredIn("A"))
	if !first.IsZero() {
		t.Errorf("60/40 split: candidate %+v at %s, want none", move, first.Sub(t0()))
	}
	first, move = writeLoop(o, "k", t0().Add(5*time.Minute), t0().Add(10*time.Minute), 100*time.Millisecond,
		pattern("B", "A", "B", "A", "B", "B", "A", "B", "A", "B"), masteredIn("C"))
	if !first.IsZero() {
		t.Errorf("60/40 split, master in C: candidate %+v at %s, want none", move, first.Sub(t0()))
	}
}

func TestOriginsMinWrites(t *testing.T) {
	o := NewOrigins(MigrationPolicy{})
	// One write every 10 s from B: 100% share, but the weighted count stays near 1.3.
	first, move := writeLoop(o, "k", t0(), t0().Add(10*time.Minute), 10*time.Second, pattern("B"), masteredIn("A"))
	if !first.IsZero() {
		t.Errorf("rare writes: candidate %+v at %s, want none (below MinWrites)", move, first.Sub(t0()))
	}
}

func TestOriginsCooldown(t *testing.T) {
	o := NewOrigins(MigrationPolicy{})
	step := 100 * time.Millisecond
	first, _ := writeLoop(o, "k", t0(), t0().Add(10*time.Second), step, pattern("B"), masteredIn("A"))
	if first.IsZero() {
		t.Fatalf("100%% from B: never a candidate")
	}
	movedAt := t0().Add(10 * time.Second)
	o.Moved(movedAt, []byte("k"))

	// The move was not carried out (the master is still A) and B keeps writing: nothing
	// for Cooldown, then the proposal comes back.
	o2 := NewOrigins(MigrationPolicy{})
	writeLoop(o2, "k", t0(), movedAt, step, pattern("B"), masteredIn("A"))
	o2.Moved(movedAt, []byte("k"))
	first, _ = writeLoop(o2, "k", movedAt.Add(step), movedAt.Add(time.Minute), step, pattern("B"), masteredIn("A"))
	if d := first.Sub(movedAt); first.IsZero() || d < DefaultCooldown || d > DefaultCooldown+step {
		t.Errorf("master still in A: first candidate %s after the move, want after Cooldown %s", d, DefaultCooldown)
	}

	// The master is now B and the writers move on to C: C becomes dominant long before the
	// cooldown ends, but the key is proposed only after it.
	first, move := writeLoop(o, "k", movedAt.Add(step), movedAt.Add(time.Minute), step, pattern("C"), masteredIn("B"))
	if d := first.Sub(movedAt); first.IsZero() || d < DefaultCooldown || d > DefaultCooldown+step || move.To != "C" {
		t.Errorf("writes from C: first candidate %+v %s after the move, want to C after Cooldown %s", move, d, DefaultCooldown)
	}
}

func TestOriginsMovedRestartsHold(t *testing.T) {
	// A short cooldown exposes the hold: after the move a region must hold the share for a
	// full Hold counted from a write after the move, not from before it.
	o := NewOrigins(MigrationPolicy{Cooldown: time.Second})
	step := 100 * time.Millisecond
	writeLoop(o, "k", t0(), t0().Add(10*time.Second), step, pattern("B"), masteredIn("A"))
	movedAt := t0().Add(10 * time.Second)
	o.Moved(movedAt, []byte("k"))
	resume := movedAt.Add(2 * time.Second) // writes resume after the cooldown
	if c := o.Candidates(resume, masteredIn("A"), 10); len(c) != 0 {
		t.Fatalf("right after the cooldown, before any write: %+v, want none", c)
	}
	first, _ := writeLoop(o, "k", resume, resume.Add(10*time.Second), step, pattern("B"), masteredIn("A"))
	if d := first.Sub(resume); first.IsZero() || d < DefaultHold || d > DefaultHold+step {
		t.Errorf("first candidate %s after writes resumed, want after Hold %s", d, DefaultHold)
	}
}

func TestOriginsAlternatingNeverFlaps(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy MigrationPolicy
	}{
		// Dominance fades out and in: with a 250 ms half-life the writing region passes
		// the share well within its turn, and between turns no region holds it.
		{"gradual", MigrationPolicy{HalfLife: 250 * time.Millisecond}},
		// Dominance jumps straight from one region to the other: the half-life is far below
		// the write interval, so the latest writer always holds ~97% (MinWrites lowered to
		// match the tiny weighted count).
		{"instant", MigrationPolicy{HalfLife: 10 * time.Millisecond, MinWrites: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Two regions take turns writing, switching every period; the master is in a
			// third one, so whichever held the share for Hold would be proposed.
			run := func(period time.Duration) (time.Time, map[string]bool) {
				o := NewOrigins(tc.policy)
				step := 50 * time.Millisecond
				perTurn := int(period / step)
				seen := map[string]bool{}
				var first time.Time
				// Bounded: 5 minutes of 50 ms steps.
				for i, now := 0, t0(); now.Before(t0().Add(5 * time.Minute)); i, now = i+1, now.Add(step) {
					region := "A"
					if (i/perTurn)%2 == 1 {
						region = "B"
					}
					o.Observe(now, []byte("k"), region)
					seen[o.entries["k"].dom] = true
					if c := o.Candidates(now, masteredIn("C"), 10); len(c) > 0 && first.IsZero() {
						first = now
					}
				}
				return first, seen
			}
			first, seen := run(DefaultHold / 2)
			if !seen["A"] || !seen["B"] {
				t.Fatalf("dominant regions seen: %v; the workload must make both A and B dominant", seen)
			}
			if !first.IsZero() {
				t.Errorf("dominance flipping every Hold/2: candidate at %s, want none", first.Sub(t0()))
			}
			// The same pattern with long turns does move: the check above is not vacuous.
			if first, _ := run(4 * DefaultHold); first.IsZero() {
				t.Errorf("dominance flipping every 4*Hold: no candidate, want one")
			}
		})
	}
}

func TestOriginsInterruptedDominanceRestartsHold(t *testing.T) {
	o := NewOrigins(MigrationPolicy{})
	step := 100 * time.Millisecond
	master := masteredIn("A")
	// B holds the share for 2 s, then a 50/50 spell breaks it, then B writes alone again.
	first, _ := writeLoop(o, "k", t0(), t0().Add(2*time.Second), step, pattern("B"), master)
	spell := t0().Add(2 * time.Second)
	back := spell.Add(2 * time.Second)
	f2, _ := writeLoop(o, "k", spell, back, step, pattern("A", "B"), master)
	if !first.IsZero() || !f2.IsZero() || o.entries["k"].dom != "" {
		t.Fatalf("before B is back: candidate at %v/%v, dominant %q; want none", first, f2, o.entries["k"].dom)
	}
	first, _ = writeLoop(o, "k", back, back.Add(20*time.Second), step, pattern("B"), master)
	if d := first.Sub(back); first.IsZero() || d < DefaultHold {
		t.Errorf("first candidate %s after B is back, want at least Hold %s (the hold restarts)", d, DefaultHold)
	}
}

func TestOriginsCandidatesOrderAndMax(t *testing.T) {
	o := NewOrigins(MigrationPolicy{})
	step := 100 * time.Millisecond
	end := t0().Add(10 * time.Second)
	writeLoop(o, "k2", t0(), end, step, pattern("B", "B", "B", "B", "B", "B", "B", "B", "B", "A"), masteredIn("A"))
	writeLoop(o, "k3", t0(), end, step, pattern("C"), masteredIn("A"))
	writeLoop(o, "k1", t0(), end, step, pattern("B"), masteredIn("A"))
	writeLoop(o, "k4", t0(), end, step, pattern("A"), masteredIn("A")) // already home
	got := o.Candidates(end, masteredIn("A"), 10)
	var keys []string
	for _, m := range got {
		keys = append(keys, fmt.Sprintf("%s->%s", m.Key, m.To))
	}
	if want := []string{"k1->B", "k3->C", "k2->B"}; !slices.Equal(keys, want) {
		t.Fatalf("Candidates = %q, want %q (share desc, then key)", keys, want)
	}
	again := o.Candidates(end, masteredIn("A"), 2)
	if len(again) != 2 || string(again[0].Key) != "k1" || string(again[1].Key) != "k3" {
		t.Errorf("Candidates(max=2) = %+v, want k1, k3", again)
	}
	if c := o.Candidates(end, masteredIn("A"), 0); c != nil {
		t.Errorf("Candidates(max=0) = %+v, want nil", c)
	}
	// Keys are copies: scribbling on them does not change the tracker.
	again[0].Key[0] = 'x'
	if c := o.Candidates(end, masteredIn("A"), 1); string(c[0].Key) != "k1" {
		t.Errorf("after modifying a returned key: %q, want k1", c[0].Key)
	}
}

func TestOriginsUnknownRegionDilutes(t *testing.T) {
	o := NewOrigins(MigrationPolicy{})
	first, move := writeLoop(o, "k", t0(), t0().Add(time.Minute), 100*time.Millisecond, pattern("B", ""), masteredIn("A"))
	if !first.IsZero() {
		t.Errorf("half the writes of unknown origin: candidate %+v, want none", move)
	}
}

func TestOriginsCapacity(t *testing.T) {
	o := NewOrigins(MigrationPolicy{Capacity: 4})
	for i := 0; i < 10; i++ {
		o.Observe(t0(), []byte(fmt.Sprintf("k%d", i)), "B")
		if len(o.entries) > 4 {
			t.Fatalf("%d entries after k%d, want at most 4", len(o.entries), i)
		}
	}
	tracked := func() []string {
		var out []string
		for e := o.tail; e != nil; e = e.prev {
			out = append(out, e.key)
		}
		return out
	}
	if got, want := tracked(), []string{"k6", "k7", "k8", "k9"}; !slices.Equal(got, want) {
		t.Fatalf("tracked (least recent first) = %q, want %q", got, want)
	}
	// Writing k6 makes it recent; the next new key evicts k7, the least recently written.
	o.Observe(t0(), []byte("k6"), "B")
	o.Observe(t0(), []byte("n1"), "B")
	if got, want := tracked(), []string{"k8", "k9", "k6", "n1"}; !slices.Equal(got, want) {
		t.Fatalf("tracked = %q, want %q", got, want)
	}

	// A key in cooldown is passed over while a key out of cooldown is near the tail.
	o.Moved(t0(), []byte("k8"))
	for _, k := range []string{"k9", "k6", "n1"} {
		o.Observe(t0(), []byte(k), "B")
	}
	o.Observe(t0(), []byte("n2"), "B")
	if got, want := tracked(), []string{"k8", "k6", "n1", "n2"}; !slices.Equal(got, want) {
		t.Fatalf("with k8 in cooldown: tracked = %q, want %q (k9 evicted, not k8)", got, want)
	}
	// After the cooldown k8 is the least recent and goes first.
	later := t0().Add(DefaultCooldown)
	o.Observe(later, []byte("n3"), "B")
	if got, want := tracked(), []string{"k6", "n1", "n2", "n3"}; !slices.Equal(got, want) {
		t.Fatalf("after the cooldown: tracked = %q, want %q", got, want)
	}
	if len(o.entries) != 4 {
		t.Errorf("%d entries, want 4", len(o.entries))
	}
}

func TestOriginsRegionsBounded(t *testing.T) {
	o := NewOrigins(MigrationPolicy{})
	for i := 0; i < 3*maxRegionsPerKey; i++ {
		o.Observe(t0(), []byte("k"), fmt.Sprintf("r%02d", i))
	}
	e := o.entries["k"]
	if len(e.regions) > maxRegionsPerKey || e.total != 3*maxRegionsPerKey {
		t.Errorf("%d regions counted, total %v; want at most %d regions and total %d",
			len(e.regions), e.total, maxRegionsPerKey, 3*maxRegionsPerKey)
	}
	// 24 writes from 24 regions, then B writes: B's share counts against every write,
	// including those of regions no longer in the table.
	for i := 0; i < 96; i++ {
		o.Observe(t0(), []byte("k"), "B")
	}
	if e.dom != "B" {
		t.Errorf("after 96 of 120 writes from B: dominant %q, want B (share 0.8)", e.dom)
	}
}

func TestMigrationPolicyValidate(t *testing.T) {
	var p MigrationPolicy
	p.EnsureDefaults()
	want := MigrationPolicy{Capacity: 4096, HalfLife: 5 * time.Second, MinWrites: 5, Share: 0.8,
		Hold: 3 * time.Second, Cooldown: 30 * time.Second}
	if p != want {
		t.Errorf("EnsureDefaults = %+v, want %+v", p, want)
	}
	for _, tc := range []struct {
		p  MigrationPolicy
		ok bool
	}{
		{MigrationPolicy{}, true},
		{MigrationPolicy{Share: 1}, true},
		{MigrationPolicy{Share: 0.51}, true},
		{MigrationPolicy{Share: 0.5}, false},
		{MigrationPolicy{Share: 1.01}, false},
		{MigrationPolicy{Share: -0.9}, false},
		{MigrationPolicy{Capacity: -1}, false},
		{MigrationPolicy{HalfLife: -1}, false},
		{MigrationPolicy{MinWrites: -1}, false},
		{MigrationPolicy{Hold: -1}, false},
		{MigrationPolicy{Cooldown: -1}, false},
	} {
		if err := tc.p.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok=%t", tc.p, err, tc.ok)
		}
	}
	defer func() {
		if recover() == nil {
			t.Errorf("NewOrigins with an invalid policy did not panic")
		}
	}()
	NewOrigins(MigrationPolicy{Share: 0.4})
}
