// Package objstoretest is the conformance suite of kawkab.ObjectStore: every implementation
// (memory, directory, the S3 model, S3 over gofakes3) runs the same tests, so they agree on
// the rules the interface documents — ranges, overwrites, idempotent deletes, sorted listings
// across S3's 1,000-key pages, key validation, atomic concurrent puts.
package objstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"meridian/internal/kawkab"
)

// Options tunes the suite.
type Options struct {
	// ManyKeys is how many objects ListMany writes under one prefix; the default, 1,100, is
	// more than one S3 LIST page (1,000 keys).
	ManyKeys int
	// Writers is how many goroutines write them (default 8).
	Writers int
	// PathKeys says the store maps keys to file paths, as VersityGW's posix backend does:
	// an object and a key "under" it ("a" and "a/b") cannot both exist, a path component
	// is at most 255 bytes, and empty, "." and ".." components are refused. The suite then
	// leaves those keys out (Kawkab's keys, <prefix>/s<id>/<object>, have none of them) and
	// checks everything else.
	PathKeys bool
}

// Run runs the suite. newStore returns an empty store; it is called once per subtest.
func Run(t *testing.T, newStore func(t *testing.T) kawkab.ObjectStore, opts Options) {
	if opts.ManyKeys == 0 {
		opts.ManyKeys = 1100
	}
	if opts.Writers == 0 {
		opts.Writers = 8
	}
	tests := []struct {
		name string
		f    func(t *testing.T, s kawkab.ObjectStore)
	}{
		{"PutGet", testPutGet},
		{"Ranges", testRanges},
		{"EmptyObject", testEmptyObject},
		{"Overwrite", testOverwrite},
		{"Delete", testDelete},
		{"NotFound", testNotFound},
		{"List", testList},
		{"ListMany", func(t *testing.T, s kawkab.ObjectStore) { testListMany(t, s, opts) }},
		{"BadKeys", func(t *testing.T, s kawkab.ObjectStore) { testBadKeys(t, s, opts) }},
		{"OddKeys", func(t *testing.T, s kawkab.ObjectStore) { testOddKeys(t, s, opts) }},
		{"LargeObject", testLargeObject},
		{"ConcurrentPuts", testConcurrentPuts},
		{"ConcurrentDeletes", testConcurrentDeletes},
		{"CanceledContext", testCanceledContext},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, newStore(t)) })
	}
}

func payload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed+1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func put(t *testing.T, s kawkab.ObjectStore, key string, data []byte) {
	t.Helper()
	if err := s.Put(context.Background(), key, data); err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", key, len(data), err)
	}
}

func get(t *testing.T, s kawkab.ObjectStore, key string, off, n int64) []byte {
	t.Helper()
	b, err := s.Get(context.Background(), key, off, n)
	if err != nil {
		t.Fatalf("Get(%q, %d, %d): %v", key, off, n, err)
	}
	return b
}

func list(t *testing.T, s kawkab.ObjectStore, prefix string) []kawkab.ObjectInfo {
	t.Helper()
	infos, err := s.List(context.Background(), prefix)
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	if !slices.IsSortedFunc(infos, func(a, b kawkab.ObjectInfo) int { return strings.Compare(a.Key, b.Key) }) {
		t.Fatalf("List(%q) not sorted by key: %v", prefix, infos)
	}
	return infos
}

func keysOf(infos []kawkab.ObjectInfo) []string {
	out := make([]string, len(infos))
	for i, in := range infos {
		out[i] = in.Key
	}
	return out
}

func testPutGet(t *testing.T, s kawkab.ObjectStore) {
	data := payload(1, 1000)
	put(t, s, "kawkab/s1/d0", data)
	got := get(t, s, "kawkab/s1/d0", 0, -1)
	if !bytes.Equal(got, data) {
		t.Fatalf("Get whole: %d bytes, want the %d put", len(got), len(data))
	}
	// The store keeps its own copy, and the caller owns what Get returns.
	data[0] ^= 0xff
	got[1] ^= 0xff
	again := get(t, s, "kawkab/s1/d0", 0, -1)
	data[0] ^= 0xff
	if !bytes.Equal(again, data) {
		t.Fatal("the stored object changed with the caller's buffers")
	}
}

func testRanges(t *testing.T, s kawkab.ObjectStore) {
	const size = 1000
	data := payload(2, size)
	put(t, s, "r", data)
	ok := []struct{ off, n int64 }{
		{0, -1}, {0, size}, {10, 20}, {999, 1}, {999, -1}, {500, -1}, {0, 1},
		{0, 0}, {500, 0}, {size, 0}, {size, -1}, // empty ranges, also at the end
	}
	for _, c := range ok {
		got := get(t, s, "r", c.off, c.n)
		end := int64(size)
		if c.n >= 0 {
			end = c.off + c.n
		}
		if want := data[c.off:end]; !bytes.Equal(got, want) {
			t.Errorf("Get(r, %d, %d): %d bytes, want %d (%x…)", c.off, c.n, len(got), len(want), want[:min(len(want), 4)])
		}
	}
	bad := []struct{ off, n int64 }{
		{size, 1},       // past the end
		{990, 20},       // n beyond the end: an error, not clamped
		{0, size + 1},   // one byte too many
		{size + 1, -1},  // off beyond the end
		{size + 1, 0},   // even for nothing
		{-1, 5},         // negative off
		{-1, -1},        // negative off to the end
		{1 << 62, 1},    // far away
		{1, 1<<63 - 1},  // off+n overflows int64
		{size + 10, 10}, // entirely after
	}
	for _, c := range bad {
		got, err := s.Get(context.Background(), "r", c.off, c.n)
		if !errors.Is(err, kawkab.ErrInvalidRange) {
			t.Errorf("Get(r, %d, %d) = %d bytes, %v; want ErrInvalidRange", c.off, c.n, len(got), err)
		}
	}
}

func testEmptyObject(t *testing.T, s kawkab.ObjectStore) {
	put(t, s, "empty", nil)
	for _, n := range []int64{-1, 0} {
		if got := get(t, s, "empty", 0, n); len(got) != 0 {
			t.Errorf("Get(empty, 0, %d) = %d bytes", n, len(got))
		}
	}
	if _, err := s.Get(context.Background(), "empty", 0, 1); !errors.Is(err, kawkab.ErrInvalidRange) {
		t.Errorf("Get(empty, 0, 1): %v, want ErrInvalidRange", err)
	}
	if infos := list(t, s, "empty"); len(infos) != 1 || infos[0] != (kawkab.ObjectInfo{Key: "empty", Size: 0}) {
		t.Errorf("List(empty) = %v", infos)
	}
}

func testOverwrite(t *testing.T, s kawkab.ObjectStore) {
	put(t, s, "o", payload(3, 5000))
	v2 := payload(4, 123)
	put(t, s, "o", v2)
	if got := get(t, s, "o", 0, -1); !bytes.Equal(got, v2) {
		t.Fatalf("after overwrite: %d bytes, want the second object's %d", len(got), len(v2))
	}
	if _, err := s.Get(context.Background(), "o", 200, 10); !errors.Is(err, kawkab.ErrInvalidRange) {
		t.Errorf("a range of the old, longer object: %v, want ErrInvalidRange", err)
	}
	if infos := list(t, s, ""); len(infos) != 1 || infos[0].Size != 123 {
		t.Errorf("List after overwrite = %v, want one object of 123 bytes", infos)
	}
}

func testDelete(t *testing.T, s kawkab.ObjectStore) {
	ctx := context.Background()
	put(t, s, "d/1", []byte("one"))
	put(t, s, "d/2", []byte("two"))
	if err := s.Delete(ctx, "d/1"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Get(ctx, "d/1", 0, -1); !errors.Is(err, kawkab.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	// Idempotent: a second delete and a delete of a key never written succeed.
	if err := s.Delete(ctx, "d/1"); err != nil {
		t.Errorf("second Delete: %v, want nil (idempotent)", err)
	}
	if err := s.Delete(ctx, "never/written"); err != nil {
		t.Errorf("Delete of a missing key: %v, want nil", err)
	}
	if got := keysOf(list(t, s, "")); !slices.Equal(got, []string{"d/2"}) {
		t.Errorf("List after Delete = %q", got)
	}
	if got := get(t, s, "d/2", 0, -1); string(got) != "two" {
		t.Errorf("the other object: %q", got)
	}
	// A deleted key can be written again.
	put(t, s, "d/1", []byte("again"))
	if got := get(t, s, "d/1", 0, -1); string(got) != "again" {
		t.Errorf("rewritten object: %q", got)
	}
}

func testNotFound(t *testing.T, s kawkab.ObjectStore) {
	ctx := context.Background()
	put(t, s, "a/b", []byte("x"))
	for _, c := range []struct {
		key    string
		off, n int64
	}{{"missing", 0, -1}, {"missing", 5, 10}, {"missing", 0, 0}, {"a", 0, -1}, {"a/", 0, -1}, {"a/b/c", 0, 1}} {
		if _, err := s.Get(ctx, c.key, c.off, c.n); !errors.Is(err, kawkab.ErrNotFound) {
			t.Errorf("Get(%q, %d, %d): %v, want ErrNotFound", c.key, c.off, c.n, err)
		}
	}
}

func testList(t *testing.T, s kawkab.ObjectStore) {
	objs := map[string]int{
		"a/1": 1, "a/2": 2, "a/b/3": 3, "ab": 4, "b": 5, "kawkab/s1/d0": 6, "kawkab/s1/i0": 7,
		"kawkab/s1/meta": 8, "kawkab/s12/d0": 9, "kawkab/s2/d0": 10,
	}
	for k, n := range objs {
		put(t, s, k, payload(uint64(n), n))
	}
	cases := map[string][]string{
		"":            {"a/1", "a/2", "a/b/3", "ab", "b", "kawkab/s1/d0", "kawkab/s1/i0", "kawkab/s1/meta", "kawkab/s12/d0", "kawkab/s2/d0"},
		"a":           {"a/1", "a/2", "a/b/3", "ab"},
		"a/":          {"a/1", "a/2", "a/b/3"},
		"a/b":         {"a/b/3"},
		"a/b/3":       {"a/b/3"},
		"a/b/3/":      nil,
		"kawkab/s1/":  {"kawkab/s1/d0", "kawkab/s1/i0", "kawkab/s1/meta"},
		"kawkab/s1":   {"kawkab/s1/d0", "kawkab/s1/i0", "kawkab/s1/meta", "kawkab/s12/d0"},
		"kawkab/s1/d": {"kawkab/s1/d0"},
		"zzz":         nil,
		"A":           nil, // case matters
	}
	for prefix, want := range cases {
		infos := list(t, s, prefix)
		if got := keysOf(infos); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Errorf("List(%q) = %q, want %q", prefix, got, want)
		}
		for _, in := range infos {
			if in.Size != int64(objs[in.Key]) {
				t.Errorf("List(%q): %q has size %d, want %d", prefix, in.Key, in.Size, objs[in.Key])
			}
		}
	}
}

func testListMany(t *testing.T, s kawkab.ObjectStore, opts Options) {
	ctx := context.Background()
	want := make([]string, opts.ManyKeys)
	for i := range want {
		// Not written in key order, and of several lengths, so the order is the store's.
		j := i * 7919 % opts.ManyKeys
		want[i] = fmt.Sprintf("many/%d/%d", j%10, j)
	}
	// Keys beside the listed prefix, before and after it ("many" itself cannot exist beside
	// "many/…" in a store of paths).
	beside := "many"
	if opts.PathKeys {
		beside = "man"
	}
	put(t, s, beside, []byte("not under many/"))
	put(t, s, "manz", []byte("after"))
	var wg sync.WaitGroup
	errs := make(chan error, opts.Writers)
	for w := range opts.Writers {
		wg.Go(func() {
			for i := w; i < len(want); i += opts.Writers {
				if err := s.Put(ctx, want[i], []byte(want[i])); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Put: %v", err)
	}
	slices.Sort(want)
	infos := list(t, s, "many/")
	if got := keysOf(infos); !slices.Equal(got, want) {
		t.Fatalf("List(many/) returned %d keys, want %d (first difference at %d)", len(got), len(want), firstDiff(got, want))
	}
	for _, in := range infos {
		if in.Size != int64(len(in.Key)) {
			t.Fatalf("%q: size %d, want %d", in.Key, in.Size, len(in.Key))
		}
	}
	if n := len(list(t, s, "")); n != opts.ManyKeys+2 {
		t.Fatalf("List(\"\") returned %d keys, want %d", n, opts.ManyKeys+2)
	}
	if got := keysOf(list(t, s, "many/1")); len(got) == 0 || !slices.IsSorted(got) {
		t.Fatalf("List(many/1) = %d keys", len(got))
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func testBadKeys(t *testing.T, s kawkab.ObjectStore, opts Options) {
	ctx := context.Background()
	bad := []string{"", strings.Repeat("k", kawkab.MaxKeyBytes+1), "a\x00b", "\x00", "bad\xffutf8"}
	for _, k := range bad {
		if err := s.Put(ctx, k, []byte("x")); !errors.Is(err, kawkab.ErrInvalidKey) {
			t.Errorf("Put(%q): %v, want ErrInvalidKey", k, err)
		}
		if _, err := s.Get(ctx, k, 0, -1); !errors.Is(err, kawkab.ErrInvalidKey) {
			t.Errorf("Get(%q): %v, want ErrInvalidKey", k, err)
		}
		if err := s.Delete(ctx, k); !errors.Is(err, kawkab.ErrInvalidKey) {
			t.Errorf("Delete(%q): %v, want ErrInvalidKey", k, err)
		}
		if k == "" {
			continue // the empty prefix lists everything
		}
		if _, err := s.List(ctx, k); !errors.Is(err, kawkab.ErrInvalidKey) {
			t.Errorf("List(%q): %v, want ErrInvalidKey", k, err)
		}
	}
	if infos := list(t, s, ""); len(infos) != 0 {
		t.Errorf("refused keys left objects: %v", infos)
	}
	if opts.PathKeys {
		return // no 1,024-byte path component
	}
	// The longest valid keys work: 1,024 bytes, also of bytes a directory store must escape.
	for _, k := range []string{strings.Repeat("k", kawkab.MaxKeyBytes), strings.Repeat(".", kawkab.MaxKeyBytes), strings.Repeat("é", kawkab.MaxKeyBytes/2)} {
		put(t, s, k, []byte(k[:10]))
		if got := get(t, s, k, 0, -1); string(got) != k[:10] {
			t.Errorf("Get(%d-byte key) = %q", len(k), got)
		}
		if got := keysOf(list(t, s, k[:100])); !slices.Equal(got, []string{k}) {
			t.Errorf("List of a %d-byte key: %d keys", len(k), len(got))
		}
		if err := s.Delete(ctx, k); err != nil {
			t.Errorf("Delete(%d-byte key): %v", len(k), err)
		}
	}
}

// OddKeys are valid keys that a naive mapping to files or URLs gets wrong.
var OddKeys = []string{
	"a", "a/b", "a/b/c", // an object and "directories" of the same name
	"a//b", "/lead", "trail/", "x/./y", "../up", "x/../../up", ".", "..", "...", ".hidden",
	"UPPER", "upper", "Upper", "dots.in.name", "sp ace", "pct%2Fenc", "pct%", "q?x=1", "h#frag",
	"plus+sign", "amp&eq=", "tilde~", "back\\slash", "tab\tnl\n", "ünïcödé/日本", "semi;colon",
	"d0.o", "d0.d", "d0.p", ".tmp-0123456789abcdef", "%41",
}

// pathKeys is OddKeys without those a store of paths refuses (Options.PathKeys): keys with
// empty, "." or ".." components, and keys that other keys are under.
func pathKeys() []string {
	var keys []string
next:
	for _, k := range OddKeys {
		for _, c := range strings.Split(k, "/") {
			if c == "" || c == "." || c == ".." {
				continue next
			}
		}
		for _, o := range OddKeys {
			if strings.HasPrefix(o, k+"/") {
				continue next
			}
		}
		keys = append(keys, k)
	}
	return keys
}

func testOddKeys(t *testing.T, s kawkab.ObjectStore, opts Options) {
	keys := OddKeys
	if opts.PathKeys {
		keys = pathKeys()
	}
	for i, k := range keys {
		put(t, s, k, []byte(fmt.Sprintf("%d:%s", i, k)))
	}
	for i, k := range keys {
		got, err := s.Get(context.Background(), k, 0, -1)
		if want := fmt.Sprintf("%d:%s", i, k); err != nil || string(got) != want {
			t.Errorf("Get(%q) = %q, %v; want %q", k, got, err, want)
		}
	}
	want := slices.Clone(keys)
	slices.Sort(want)
	if got := keysOf(list(t, s, "")); !slices.Equal(got, want) {
		t.Errorf("List = %q,\nwant %q", got, want)
	}
	wantA := []string{"a//b", "a/b", "a/b/c"}
	if opts.PathKeys {
		wantA = []string{"a/b/c"}
	}
	if got := keysOf(list(t, s, "a/")); !slices.Equal(got, wantA) {
		t.Errorf("List(a/) = %q", got)
	}
	for _, k := range keys {
		if err := s.Delete(context.Background(), k); err != nil {
			t.Errorf("Delete(%q): %v", k, err)
		}
	}
	if got := list(t, s, ""); len(got) != 0 {
		t.Errorf("after deleting every key: %v", got)
	}
}

func testLargeObject(t *testing.T, s kawkab.ObjectStore) {
	const chunk = 4 << 20
	data := payload(5, chunk)
	put(t, s, "kawkab/s7/d3", data)
	if got := get(t, s, "kawkab/s7/d3", 0, -1); !bytes.Equal(got, data) {
		t.Fatal("4 MiB object read back differs")
	}
	// A 64 KiB ranged read of block 100 and the last block, as historical reads do.
	for _, off := range []int64{100 * 16384, chunk - 65536} {
		if got := get(t, s, "kawkab/s7/d3", off, 65536); !bytes.Equal(got, data[off:off+65536]) {
			t.Fatalf("ranged 64 KiB read at %d differs", off)
		}
	}
}

func testConcurrentPuts(t *testing.T, s kawkab.ObjectStore) {
	ctx := context.Background()
	const writers, perWriter = 8, 12
	// Every version of the shared key has its own length and content, so a torn or mixed
	// read shows.
	versions := make([][]byte, writers)
	for w := range versions {
		versions[w] = bytes.Repeat([]byte{byte('A' + w)}, 1000+w*997)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*writers)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				key := fmt.Sprintf("c/%d/%d", w, i)
				if err := s.Put(ctx, key, []byte(key)); err != nil {
					errs <- err
					return
				}
				if err := s.Put(ctx, "c/shared", versions[w]); err != nil {
					errs <- err
					return
				}
			}
		})
		wg.Go(func() { // a reader racing the writers of the shared key
			for range perWriter {
				got, err := s.Get(ctx, "c/shared", 0, -1)
				if errors.Is(err, kawkab.ErrNotFound) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				if !slices.ContainsFunc(versions, func(v []byte) bool { return bytes.Equal(v, got) }) {
					errs <- fmt.Errorf("read a torn shared object of %d bytes", len(got))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := range writers {
		for i := range perWriter {
			key := fmt.Sprintf("c/%d/%d", w, i)
			if got := get(t, s, key, 0, -1); string(got) != key {
				t.Fatalf("Get(%q) = %q", key, got)
			}
		}
	}
	final := get(t, s, "c/shared", 0, -1)
	if !slices.ContainsFunc(versions, func(v []byte) bool { return bytes.Equal(v, final) }) {
		t.Fatalf("the shared key holds none of the versions written (%d bytes)", len(final))
	}
	if n := len(list(t, s, "c/")); n != writers*perWriter+1 {
		t.Fatalf("List(c/) = %d keys, want %d", n, writers*perWriter+1)
	}
}

// Writers creating and deleting keys side by side under one prefix never fail (a directory
// store creates and removes the same directories meanwhile), and the prefix ends empty.
func testConcurrentDeletes(t *testing.T, s kawkab.ObjectStore) {
	ctx := context.Background()
	const writers, rounds = 8, 15
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range rounds {
				key := fmt.Sprintf("cd/shared/%d/%d", i%2, w)
				if err := s.Put(ctx, key, []byte(key)); err != nil {
					errs <- err
					return
				}
				if got, err := s.Get(ctx, key, 0, -1); err != nil || string(got) != key {
					errs <- fmt.Errorf("Get(%q) = %q, %v", key, got, err)
					return
				}
				if _, err := s.List(ctx, "cd/"); err != nil {
					errs <- err
					return
				}
				if err := s.Delete(ctx, key); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := list(t, s, "cd/"); len(got) != 0 {
		t.Fatalf("left after every delete: %v", got)
	}
}

func testCanceledContext(t *testing.T, s kawkab.ObjectStore) {
	put(t, s, "k", []byte("v"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Put(ctx, "k2", []byte("v")); !errors.Is(err, context.Canceled) {
		t.Errorf("Put: %v, want context.Canceled", err)
	}
	if _, err := s.Get(ctx, "k", 0, -1); !errors.Is(err, context.Canceled) {
		t.Errorf("Get: %v, want context.Canceled", err)
	}
	if err := s.Delete(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Delete: %v, want context.Canceled", err)
	}
	if _, err := s.List(ctx, ""); !errors.Is(err, context.Canceled) {
		t.Errorf("List: %v, want context.Canceled", err)
	}
	if got := keysOf(list(t, s, "")); !slices.Equal(got, []string{"k"}) {
		t.Errorf("after canceled calls: %q, want [k]", got)
	}
}
