package ycsb

import (
	"sort"
	"testing"
)

// Hashed key names of records 0, 1, 2 as YCSB writes them in its load phase (they appear in
// that order in YCSB load traces: INSERT usertable user6284781860667377211 ...).
func TestKeyNameMatchesYCSB(t *testing.T) {
	for _, c := range []struct {
		keynum  uint64
		ordered bool
		pad     int
		want    string
	}{
		{0, false, 1, "user6284781860667377211"},
		{1, false, 1, "user8517097267634966620"},
		{2, false, 1, "user1820151046732198393"},
		{3, false, 1, "user4052466453699787802"},
		{4, false, 1, "user3232700585171816769"},
		{5, true, 1, "user5"},
		{0, true, 1, "user0"},
		{1234567, true, 1, "user1234567"},
		// CoreWorkload's javadoc: row 5 with zeropadding=8 is "user00000005".
		{5, true, 8, "user00000005"},
		{7, true, 5, "user00007"},
		{123456, true, 3, "user123456"},
		{0, false, 25, "user000000" + "6284781860667377211"}, // 19 digits padded to 25
	} {
		got := string(AppendKeyName(nil, c.keynum, c.ordered, c.pad))
		if got != c.want {
			t.Errorf("AppendKeyName(%d, ordered=%v, pad=%d) = %q, want %q", c.keynum, c.ordered, c.pad, got, c.want)
		}
	}
	if got := string(KeyName(5, true)); got != "user5" {
		t.Errorf("KeyName(5, ordered) = %q, want user5", got)
	}
	if got := string(KeyName(0, false)); got != "user6284781860667377211" {
		t.Errorf("KeyName(0, hashed) = %q", got)
	}
}

func TestFNVHash64(t *testing.T) {
	// Utils.fnvhash64 values (Math.abs of FNV-1a over the 8 little-endian bytes).
	for v, want := range map[uint64]uint64{
		0:    6284781860667377211,
		1:    8517097267634966620,
		2:    1820151046732198393,
		999:  2071219101098386137,
		1000: 5952875239596136740,
	} {
		if got := FNVHash64(v); got != want {
			t.Errorf("FNVHash64(%d) = %d, want %d", v, got, want)
		}
	}
	for v := range uint64(100000) {
		if h := FNVHash64(v); h >= 1<<63 && h != javaMinLong {
			t.Fatalf("FNVHash64(%d) = %d is not a Java Math.abs result", v, h)
		}
	}
}

func TestLoadKeyMatchesKeyName(t *testing.T) {
	w := Defaults()
	for i := range 100 {
		if got, want := string(w.LoadKey(i)), string(KeyName(uint64(i), false)); got != want {
			t.Fatalf("LoadKey(%d) = %q, want %q", i, got, want)
		}
	}
	w.OrderedInserts = true
	w.ZeroPadding = 4
	if got := string(w.LoadKey(12)); got != "user0012" {
		t.Fatalf("ordered LoadKey(12) with zeropadding 4 = %q, want user0012", got)
	}
}

// TestSplitPointsSpreadHashedKeys: 16 partitions from SplitPoints get about 1/16 of any
// hashed key set each (here 100,000 keys, not the 65,536 the quantiles came from), and the
// boundaries are strictly increasing.
func TestSplitPointsSpreadHashedKeys(t *testing.T) {
	sp := SplitPoints(16)
	if len(sp) != 15 {
		t.Fatalf("SplitPoints(16) has %d boundaries, want 15: %q", len(sp), sp)
	}
	for i := 1; i < len(sp); i++ {
		if sp[i] <= sp[i-1] {
			t.Fatalf("boundaries not increasing: %q", sp)
		}
	}
	counts := make([]int, 16)
	const n = 100_000
	for k := range uint64(n) {
		key := string(KeyName(k, false))
		i := sort.SearchStrings(sp, key)
		if i < len(sp) && sp[i] == key {
			i++
		}
		counts[i]++
	}
	for i, c := range counts {
		if c < n/16*8/10 || c > n/16*12/10 {
			t.Fatalf("partition %d holds %d of %d keys (boundaries %q): not within 20%% of an equal share; counts %v", i, c, n, sp, counts)
		}
	}
	if SplitPoints(1) != nil {
		t.Fatal("one partition needs no split points")
	}
}
