package kawkab

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// ---------------------------------------------------------------------------------------------
// Geometry
// ---------------------------------------------------------------------------------------------

func mustHeap(t testing.TB, k int) Heap {
	t.Helper()
	h, err := NewHeap(k)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// subtreeSizes are the sizes of the trees of the peaks, in the order given.
func subtreeSizes(h Heap, peaks []uint64) []uint64 {
	var out []uint64
	for _, p := range peaks {
		f, l := h.Subtree(p)
		out = append(out, l-f+1)
	}
	return out
}

// Fig. 5.5: a binary post-order heap of 27 nodes in five sub-trees of 15, 7, 3, 1 and 1 nodes.
func TestHeapFig55(t *testing.T) {
	h := mustHeap(t, 2)
	peaks := h.Peaks(27)
	if want := []uint64{27, 26, 25, 22, 15}; !slices.Equal(peaks, want) {
		t.Fatalf("peaks of 27 nodes: %v, want %v", peaks, want)
	}
	if got, want := subtreeSizes(h, peaks), []uint64{1, 1, 3, 7, 15}; !slices.Equal(got, want) {
		t.Fatalf("sub-tree sizes %v, want %v (Fig. 5.5: 15, 7, 3, 1, 1 from the left)", got, want)
	}
	// The first tree of Fig. 5.5, children created left to right before the parent.
	children := map[uint64][]uint64{15: {7, 14}, 7: {3, 6}, 14: {10, 13}, 3: {1, 2}, 6: {4, 5}, 10: {8, 9}, 13: {11, 12}, 22: {18, 21}, 25: {23, 24}}
	for j, want := range children {
		if got := h.Children(j); !slices.Equal(got, want) {
			t.Errorf("children of %d: %v, want %v", j, got, want)
		}
	}
	heights := map[uint64]int{1: 0, 2: 0, 3: 1, 6: 1, 7: 2, 14: 2, 15: 3, 22: 2, 25: 1, 26: 0, 27: 0}
	for j, want := range heights {
		if got := h.Height(j); got != want {
			t.Errorf("height of %d: %d, want %d", j, got, want)
		}
	}
	for j := uint64(1); j <= 27; j++ {
		if got, want := h.IsRoot(j, 27), slices.Contains(peaks, j); got != want {
			t.Errorf("IsRoot(%d, 27) = %v, want %v", j, got, want)
		}
	}
	if f, l := h.Subtree(22); f != 16 || l != 22 {
		t.Errorf("subtree of 22: [%d, %d], want [16, 22]", f, l)
	}
}

// Fig. 5.7: 12 nodes in four sub-trees T1–T4 of 7, 3, 1 and 1 nodes.
func TestHeapFig57(t *testing.T) {
	h := mustHeap(t, 2)
	peaks := h.Peaks(12)
	if want := []uint64{12, 11, 10, 7}; !slices.Equal(peaks, want) {
		t.Fatalf("peaks of 12 nodes: %v, want %v", peaks, want)
	}
	if got, want := subtreeSizes(h, peaks), []uint64{1, 1, 3, 7}; !slices.Equal(got, want) {
		t.Fatalf("sub-tree sizes %v, want %v", got, want)
	}
	if got := h.Children(10); !slices.Equal(got, []uint64{8, 9}) {
		t.Fatalf("children of N10: %v", got)
	}
}

type simNode struct {
	height   int
	children []uint64
}

// simulate grows a k-ary post-order heap node by node, the way 5.5.1 describes it — a new
// node is the parent of the last k trees when they have the same height, a leaf otherwise —
// and returns every node and, for every N, the roots of the forest of the first N nodes,
// newest first. It shares no arithmetic with Heap.
func simulate(k, nodes int) (map[uint64]simNode, [][]uint64) {
	all := map[uint64]simNode{}
	peaks := [][]uint64{nil}
	var stack []uint64 // roots, oldest first
	for j := uint64(1); j <= uint64(nodes); j++ {
		nd := simNode{}
		if len(stack) >= k {
			top := stack[len(stack)-k:]
			same := true
			for _, r := range top {
				same = same && all[r].height == all[top[0]].height
			}
			if same {
				nd.height = all[top[0]].height + 1
				nd.children = slices.Clone(top)
				stack = stack[:len(stack)-k]
			}
		}
		all[j] = nd
		stack = append(stack, j)
		p := slices.Clone(stack)
		slices.Reverse(p)
		peaks = append(peaks, p)
	}
	return all, peaks
}

func TestHeapAgainstSimulation(t *testing.T) {
	for _, k := range []int{2, 3, 4, 8} {
		const nodes = 1500
		h := mustHeap(t, k)
		all, peaks := simulate(k, nodes)
		for j := uint64(1); j <= nodes; j++ {
			nd := all[j]
			if got := h.Height(j); got != nd.height {
				t.Fatalf("k=%d: height of %d: %d, want %d", k, j, got, nd.height)
			}
			if got := h.Children(j); !slices.Equal(got, nd.children) {
				t.Fatalf("k=%d: children of %d: %v, want %v", k, j, got, nd.children)
			}
			f, l := h.Subtree(j)
			if l != j || l-f+1 != h.Size(nd.height) {
				t.Fatalf("k=%d: subtree of %d: [%d, %d]", k, j, f, l)
			}
			if got := h.Peaks(j); !slices.Equal(got, peaks[j]) {
				t.Fatalf("k=%d: peaks of %d nodes: %v, want %v", k, j, got, peaks[j])
			}
			// At most k−1 peaks per height, k at the lowest only.
			hmax := h.Height(peaks[j][len(peaks[j])-1])
			if len(peaks[j]) > (k-1)*(hmax+1)+1 {
				t.Fatalf("k=%d: %d peaks of %d nodes with height %d", k, len(peaks[j]), j, hmax)
			}
		}
		for n := uint64(0); n <= 200; n++ {
			for j := uint64(0); j <= n+1; j++ {
				if got, want := h.IsRoot(j, n), slices.Contains(peaks[min(n, nodes)], j) && j <= n; got != want {
					t.Fatalf("k=%d: IsRoot(%d, %d) = %v, want %v", k, j, n, got, want)
				}
			}
		}
	}
}

func TestHeapLimits(t *testing.T) {
	for _, k := range []int{-1, 0, 1, MaxK + 1} {
		if _, err := NewHeap(k); err == nil {
			t.Errorf("NewHeap(%d) accepted", k)
		}
		if _, err := (Config{K: k}).Resolve(); k != 0 && err == nil {
			t.Errorf("Config{K: %d} accepted", k)
		}
	}
	h := mustHeap(t, 2)
	if got := h.Height(math.MaxUint64); got != 63 {
		t.Errorf("height of 2^64−1 in a binary heap: %d, want 63", got)
	}
	for _, k := range []int{2, 3, 8, MaxK} {
		h := mustHeap(t, k)
		for _, n := range []uint64{math.MaxUint64, math.MaxUint64 - 1, 1 << 40, 12345678901} {
			var sum uint64
			prev := 0
			for _, p := range h.Peaks(n) { // newest first: never lower than the one before
				f, l := h.Subtree(p)
				sum += l - f + 1
				if ht := h.Height(p); ht < prev {
					t.Fatalf("k=%d n=%d: peak %d of height %d after one of %d", k, n, p, ht, prev)
				} else {
					prev = ht
				}
				if !h.IsRoot(p, n) {
					t.Fatalf("k=%d n=%d: peak %d is not a root", k, n, p)
				}
			}
			if sum != n {
				t.Fatalf("k=%d: the peaks of %d nodes cover %d", k, n, sum)
			}
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Height(0) did not panic")
		}
	}()
	h.Height(0)
}

// ---------------------------------------------------------------------------------------------
// The entry formula
// ---------------------------------------------------------------------------------------------

func TestEntryFormula(t *testing.T) {
	// The thesis's "i × j" (1-based i, j) describes two entries by one block.
	thesis := func(i, j uint64) uint64 { return i * j }
	if thesis(1, 2) != thesis(2, 1) {
		t.Fatal("i × j distinguishes e_{1,2} from e_{2,1}")
	}
	// With 1-based i and j, (j−1)·n + i; this package's EntryBlock takes 1-based j and
	// 0-based i and gives 0-based blocks: the same numbering shifted by one.
	for _, n := range []int{1, 2, 3, 289} {
		if EntryBlock(n, 2, 0) == EntryBlock(n, 1, 1) && n > 1 {
			t.Fatalf("n=%d: e_{1,2} and e_{2,1} describe the same block", n)
		}
		for b := uint64(0); b < uint64(10*n); b++ {
			j, i := BlockEntry(n, b)
			if i < 0 || i >= n || j < 1 {
				t.Fatalf("n=%d: block %d -> node %d entry %d", n, b, j, i)
			}
			if got := EntryBlock(n, j, i); got != b {
				t.Fatalf("n=%d: block %d -> node %d entry %d -> block %d", n, b, j, i, got)
			}
			if got1 := (j-1)*uint64(n) + uint64(i+1); got1 != b+1 {
				t.Fatalf("1-based formula: e_{%d,%d} -> %d, want %d", i+1, j, got1, b+1)
			}
		}
	}
	// The index places block b's entry there: each block's single record has timestamp b.
	for _, n := range []int{1, 3} {
		x, store := newIndex(t, Config{K: 2, N: n, BlockSize: BlockSizeFor(2, n)})
		for b := uint64(0); b < 40; b++ {
			appendBlock(t, x, b, []Record{{TS: int64(b), Value: 1}}, true)
		}
		for b := uint64(0); b < 40; b++ {
			j, i := BlockEntry(n, b)
			nd := getNode(t, store, j)
			if e := nd.Body[i]; e.TsMin != int64(b) {
				t.Fatalf("n=%d: block %d's entry is node %d entry %d, which holds %v", n, b, j, i, e)
			}
		}
	}
}

// ---------------------------------------------------------------------------------------------
// Helpers: random streams and brute force
// ---------------------------------------------------------------------------------------------

func newIndex(t testing.TB, cfg Config) (*Index, *MemNodeStore) {
	t.Helper()
	store := NewMemNodeStore()
	x, err := NewIndex(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return x, store
}

func appendBlock(t testing.TB, x *Index, b uint64, recs []Record, seal bool) {
	t.Helper()
	for _, r := range recs {
		if err := x.Append(b, r.TS, r.Value); err != nil {
			t.Fatal(err)
		}
	}
	if seal {
		if err := x.Seal(b); err != nil {
			t.Fatal(err)
		}
	}
}

func getNode(t testing.TB, store NodeStore, j uint64) *Node {
	t.Helper()
	b, err := store.Get(j)
	if err != nil {
		t.Fatal(err)
	}
	nd, err := UnmarshalNode(b)
	if err != nil {
		t.Fatal(err)
	}
	return nd
}

// randomStream draws blocks of 1 … maxRecs records with non-decreasing timestamps: many
// duplicates, runs of one timestamp that span several blocks, gaps, and now and then values
// near the int64 limits (sums beyond int64).
func randomStream(rng *rand.Rand, blocks, maxRecs int) [][]Record {
	out := make([][]Record, blocks)
	ts := rng.Int63n(100) - 50
	run := 0
	for b := range out {
		r := 1 + rng.Intn(maxRecs)
		for range r {
			switch {
			case run > 0:
				run--
			case rng.Intn(40) == 0:
				run = rng.Intn(4 * maxRecs)
			case rng.Intn(3) == 0:
			case rng.Intn(20) == 0:
				ts += 20 + rng.Int63n(50)
			default:
				ts += 1 + rng.Int63n(4)
			}
			v := rng.Int63n(2001) - 1000
			switch rng.Intn(30) {
			case 0:
				v = math.MaxInt64 - rng.Int63n(3)
			case 1:
				v = math.MinInt64 + rng.Int63n(3)
			}
			out[b] = append(out[b], Record{TS: ts, Value: v})
		}
	}
	return out
}

func buildStream(t testing.TB, cfg Config, blocks [][]Record, sealLast bool) (*Index, *MemNodeStore) {
	t.Helper()
	x, store := newIndex(t, cfg)
	for b, recs := range blocks {
		appendBlock(t, x, uint64(b), recs, b < len(blocks)-1 || sealLast)
	}
	return x, store
}

func blockEntry(recs []Record) Entry {
	e := Entry{TsMin: recs[0].TS, TsMax: recs[len(recs)-1].TS}
	for _, r := range recs {
		e.Summary.Add(r.Value)
	}
	return e
}

// bruteSearch is the blocks whose [min, max] overlap [tl, th], checked to be consecutive.
func bruteSearch(t testing.TB, blocks [][]Record, tl, th int64) (found bool, first, last uint64) {
	t.Helper()
	var in []uint64
	for b, recs := range blocks {
		if e := blockEntry(recs); e.TsMin <= th && e.TsMax >= tl {
			in = append(in, uint64(b))
		}
	}
	if len(in) == 0 {
		return false, 0, 0
	}
	for i := range in {
		if in[i] != in[0]+uint64(i) {
			t.Fatalf("brute force: overlapping blocks %v are not consecutive", in)
		}
	}
	return true, in[0], in[len(in)-1]
}

func bruteSummary(blocks [][]Record, tl, th int64) Summary {
	var s Summary
	for _, recs := range blocks {
		s = s.Merge(SummarizeRange(recs, tl, th))
	}
	return s
}

func queries(rng *rand.Rand, blocks [][]Record, count int) [][2]int64 {
	lo := blocks[0][0].TS - 3
	last := blocks[len(blocks)-1]
	hi := last[len(last)-1].TS + 3
	pick := func() int64 {
		if rng.Intn(2) == 0 {
			recs := blocks[rng.Intn(len(blocks))]
			return recs[rng.Intn(len(recs))].TS // a timestamp that occurs
		}
		return lo + rng.Int63n(hi-lo+1)
	}
	var out [][2]int64
	for len(out) < count {
		a, b := pick(), pick()
		switch rng.Intn(4) {
		case 0:
			b = a // a point search
		case 1:
			b = min(a+rng.Int63n(6), hi) // a short range
		}
		out = append(out, [2]int64{min(a, b), max(a, b)})
	}
	return out
}

// ---------------------------------------------------------------------------------------------
// Search and Aggregate against brute force
// ---------------------------------------------------------------------------------------------

var propertyConfigs = []Config{
	{K: 2, N: 1}, {K: 2, N: 3}, {K: 2, N: 50},
	{K: 3, N: 1}, {K: 3, N: 4}, {K: 3}, // {K: 3} is the default geometry: n = 289
	{K: 8, N: 1}, {K: 8, N: 2},
}

func configBlocks(cfg Config) int {
	switch {
	case cfg.N == 0:
		return 289*14 + 100 // 14 full nodes and one more: a tree of 13 and two leaves
	case cfg.N == 1 && cfg.K == 8:
		return 700 // 8-ary trees of 585 and 73 nodes
	case cfg.N == 1:
		return 600
	case cfg.N == 50:
		return 2000
	}
	return 400
}

// checkVisits checks a search's reads against the walk of 5.5.3: it starts at the last node,
// reads peaks newest first without skipping one, reads any other node only after its parent,
// reads no node twice, and reads at most P + 2·H nodes.
func checkVisits(t testing.TB, x *Index, visited []uint64) {
	t.Helper()
	if x.Nodes() == 0 {
		if len(visited) != 0 {
			t.Fatalf("an empty index read %v", visited)
		}
		return
	}
	h := x.Heap()
	peaks := h.Peaks(x.Nodes())
	hmax := h.Height(peaks[len(peaks)-1])
	if len(visited) == 0 || visited[0] != x.Nodes() {
		t.Fatalf("the search read %v, not starting at the last node %d", visited, x.Nodes())
	}
	if len(visited) > len(peaks)+2*hmax {
		t.Fatalf("the search read %d nodes %v; the bound is %d peaks + 2·%d", len(visited), visited, len(peaks), hmax)
	}
	seen := map[uint64]bool{}
	np := 0
	for _, j := range visited {
		if seen[j] {
			t.Fatalf("node %d read twice: %v", j, visited)
		}
		seen[j] = true
		if h.IsRoot(j, x.Nodes()) {
			if j != peaks[np] {
				t.Fatalf("peak %d read before peak %d: %v", j, peaks[np], visited)
			}
			np++
			continue
		}
		parentSeen := false
		for p := range seen {
			parentSeen = parentSeen || slices.Contains(h.Children(p), j)
		}
		if !parentSeen {
			t.Fatalf("node %d read before its parent: %v (peaks %v)", j, visited, peaks)
		}
	}
}

func TestSearchAgainstBruteForce(t *testing.T) {
	recentTotal := 0
	for ci, cfg := range propertyConfigs {
		t.Run(fmt.Sprintf("k=%d,n=%d", cfg.K, cfg.N), func(t *testing.T) {
			rng := rand.New(rand.NewSource(int64(100 + ci)))
			if cfg.N > 0 {
				cfg.BlockSize = BlockSizeFor(cfg.K, cfg.N)
			}
			blocks := randomStream(rng, configBlocks(cfg), 6)
			x, _ := buildStream(t, cfg, blocks, rng.Intn(2) == 0)
			n := x.Config().N
			lastLo, _ := x.subtreeBlocks(x.Nodes())
			recentOnly := 0
			// Random ranges, and ranges in the last node's blocks (recent data).
			qs := queries(rng, blocks, 250)
			qs = append(qs, queries(rng, blocks[EntryBlock(n, x.Nodes(), 0):], 50)...)
			for _, q := range qs {
				tl, th := q[0], q[1]
				r, err := x.Search(tl, th)
				if err != nil {
					t.Fatal(err)
				}
				found, first, last := bruteSearch(t, blocks, tl, th)
				if r.Found != found || (found && (r.First != first || r.Last != last)) {
					t.Fatalf("Search(%d, %d) = %v [%d, %d], brute force %v [%d, %d]", tl, th, r.Found, r.First, r.Last, found, first, last)
				}
				// Every block that holds a record in range is in the answer.
				for b, recs := range blocks {
					if SummarizeRange(recs, tl, th).Count > 0 && (!found || uint64(b) < first || uint64(b) > last) {
						t.Fatalf("Search(%d, %d) misses block %d", tl, th, b)
					}
				}
				checkVisits(t, x, r.Visited)
				// Recent data: the answer in the last node's body and the last node's range
				// starting before tl — only the last node is read.
				if found && first >= EntryBlock(n, x.Nodes(), 0) && blocks[lastLo][0].TS < tl {
					recentOnly++
					if !slices.Equal(r.Visited, []uint64{x.Nodes()}) {
						t.Fatalf("Search(%d, %d) of data in the last node read %v", tl, th, r.Visited)
					}
				}
				// Aggregate: the same blocks and nodes, at most two edges, and the total
				// with the edges read equals brute force.
				g, err := x.Aggregate(tl, th)
				if err != nil {
					t.Fatal(err)
				}
				if g.Found != r.Found || g.First != r.First || g.Last != r.Last || !slices.Equal(g.Visited, r.Visited) {
					t.Fatalf("Aggregate(%d, %d) = %+v, Search %+v", tl, th, g, r)
				}
				checkAggregate(t, blocks, g, tl, th)
			}
			recentTotal += recentOnly
		})
	}
	if recentTotal < 20 {
		t.Fatalf("only %d queries exercised the recent-data case", recentTotal)
	}
}

func checkAggregate(t testing.TB, blocks [][]Record, g Aggregation, tl, th int64) {
	t.Helper()
	if len(g.Edges) > 2 {
		t.Fatalf("Aggregate(%d, %d): %d edges", tl, th, len(g.Edges))
	}
	var inner Summary
	var innerBlocks uint64
	var edges []uint64
	var edgeSums []Summary
	if g.Found {
		for b := g.First; b <= g.Last; b++ {
			e := blockEntry(blocks[b])
			if e.TsMin >= tl && e.TsMax <= th {
				inner = inner.Merge(e.Summary)
				innerBlocks++
			} else {
				edges = append(edges, b)
				edgeSums = append(edgeSums, SummarizeRange(blocks[b], tl, th))
			}
		}
	}
	if !slices.Equal(g.Edges, edges) {
		t.Fatalf("Aggregate(%d, %d): edges %v, want %v", tl, th, g.Edges, edges)
	}
	if g.Inner != inner || g.InnerBlocks != innerBlocks {
		t.Fatalf("Aggregate(%d, %d): inner %d blocks %v, want %d blocks %v", tl, th, g.InnerBlocks, g.Inner, innerBlocks, inner)
	}
	total, err := g.Combine(edgeSums...)
	if err != nil {
		t.Fatal(err)
	}
	if want := bruteSummary(blocks, tl, th); total != want {
		t.Fatalf("Aggregate(%d, %d) with its edges: %v, brute force %v", tl, th, total, want)
	}
	if _, err := g.Combine(append(edgeSums, Summary{})...); err == nil {
		t.Fatalf("Combine accepted %d summaries for %d edges", len(edgeSums)+1, len(edges))
	}
}

// The answer for records of one timestamp that span data blocks: every block that holds it.
func TestSearchEqualTimestampsAcrossBlocks(t *testing.T) {
	for _, cfg := range []Config{{K: 2, N: 1}, {K: 2, N: 2}, {K: 3, N: 2}} {
		cfg.BlockSize = BlockSizeFor(cfg.K, cfg.N)
		blocks := [][]Record{
			{{1, 1}, {3, 1}},                 // 0
			{{3, 2}, {5, 2}},                 // 1: ends at 5
			{{5, 3}, {5, 3}},                 // 2: all 5
			{{5, 4}},                         // 3: all 5
			{{5, 5}, {5, 5}, {5, 5}, {7, 5}}, // 4: starts at 5
			{{7, 6}, {9, 6}},                 // 5
			{{9, 7}},                         // 6
			{{11, 8}},                        // 7
		}
		x, _ := buildStream(t, cfg, blocks, true)
		for _, c := range []struct {
			tl, th      int64
			first, last uint64
		}{
			{5, 5, 1, 4}, {3, 3, 0, 1}, {7, 7, 4, 5}, {9, 9, 5, 6}, {4, 6, 1, 4}, {5, 9, 1, 6}, {1, 11, 0, 7}, {11, 11, 7, 7},
			// Blocks whose range covers a timestamp they do not hold may still hold it.
			{2, 2, 0, 0}, {6, 6, 4, 4},
		} {
			r, err := x.Search(c.tl, c.th)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Found || r.First != c.first || r.Last != c.last {
				t.Errorf("k=%d n=%d: Search(%d, %d) = %v [%d, %d], want [%d, %d]", cfg.K, cfg.N, c.tl, c.th, r.Found, r.First, r.Last, c.first, c.last)
			}
			g, err := x.Aggregate(c.tl, c.th)
			if err != nil {
				t.Fatal(err)
			}
			checkAggregate(t, blocks, g, c.tl, c.th)
		}
		for _, q := range [][2]int64{{0, 0}, {12, 20}, {10, 10}, {-5, 0}} {
			if r, err := x.Search(q[0], q[1]); err != nil || r.Found {
				t.Errorf("Search(%d, %d) = %+v, %v; want nothing", q[0], q[1], r, err)
			}
		}
	}
	x, _ := newIndex(t, Config{K: 2, N: 1, BlockSize: BlockSizeFor(2, 1)})
	if _, err := x.Search(5, 4); err == nil {
		t.Error("Search(5, 4) accepted")
	}
	if r, err := x.Search(0, 100); err != nil || r.Found || r.Visits() != 0 {
		t.Errorf("search of an empty index: %+v, %v", r, err)
	}
}

// fig57 is the index of Fig. 5.7: binary, 12 nodes of two entries, data block b holding one
// record at 10·b, so node j holds the timestamps 20·(j−1) and 20·(j−1)+10.
func fig57(t *testing.T) *Index {
	x, _ := newIndex(t, Config{K: 2, N: 2, BlockSize: BlockSizeFor(2, 2)})
	for b := uint64(0); b < 24; b++ {
		appendBlock(t, x, b, []Record{{TS: int64(10 * b), Value: int64(b)}}, true)
	}
	if x.Nodes() != 12 {
		t.Fatalf("%d nodes", x.Nodes())
	}
	return x
}

func TestSearchFig57(t *testing.T) {
	x := fig57(t)
	for _, c := range []struct {
		ts      int64
		visited []uint64
		found   bool
		block   uint64
	}{
		// The thesis: a timestamp in node N4 is found through N12, N11, N10, N7, N6, N4.
		{60, []uint64{12, 11, 10, 7, 6, 4}, true, 6},
		{70, []uint64{12, 11, 10, 7, 6, 4}, true, 7},
		// Recent data: the last node alone.
		{230, []uint64{12}, true, 23},
		{500, []uint64{12}, false, 0},
		// In T2: its root N10 points to N9.
		{170, []uint64{12, 11, 10, 9}, true, 17},
		// Between two records of N4: the same walk finds no block.
		{65, []uint64{12, 11, 10, 7, 6, 4}, false, 0},
		// Between N6's subtree (up to 110) and N7's body (from 120): N7's header says that
		// N6 ends before 115, so the search stops without reading it.
		{115, []uint64{12, 11, 10, 7}, false, 0},
		// Before everything: every peak, then down the left edge of T1.
		{0, []uint64{12, 11, 10, 7, 3, 1}, true, 0},
		{-5, []uint64{12, 11, 10, 7}, false, 0},
	} {
		r, err := x.Search(c.ts, c.ts)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(r.Visited, c.visited) || r.Found != c.found || (c.found && (r.First != c.block || r.Last != c.block)) {
			t.Errorf("Search(%d): %+v, want visits %v found=%v block %d", c.ts, r, c.visited, c.found, c.block)
		}
	}
}

// The thesis bounds a search by O(k) + O(log_k n) index blocks. The walk it describes reads
// up to k−1 peaks of every height, so for a growing heap of fixed k the worst case grows by
// k blocks per level (k−1 peaks and one level of descent), not by one: O(k·log_k n). This
// test pins that down (and the exact count P + H of the worst case).
func TestSearchWorstCaseGrowth(t *testing.T) {
	const k = 8
	h := mustHeap(t, k)
	prev := 0
	for H := 0; H <= 3; H++ {
		// k−1 trees of every height H, H−1, …, 0: the most peaks for the height.
		var nodes uint64
		for ht := 0; ht <= H; ht++ {
			nodes += (k - 1) * h.Size(ht)
		}
		x, _ := newIndex(t, Config{K: k, N: 1, BlockSize: BlockSizeFor(k, 1)})
		for b := uint64(0); b < nodes; b++ {
			appendBlock(t, x, b, []Record{{TS: int64(b), Value: 1}}, true)
		}
		r, err := x.Search(0, 0) // the oldest block
		if err != nil {
			t.Fatal(err)
		}
		peaks := len(h.Peaks(nodes))
		if peaks != (k-1)*(H+1) || r.Visits() != peaks+H {
			t.Fatalf("H=%d: %d nodes, %d peaks, %d visits; want %d peaks and %d visits", H, nodes, peaks, r.Visits(), (k-1)*(H+1), (k-1)*(H+1)+H)
		}
		if H > 0 && r.Visits()-prev != k {
			t.Fatalf("H=%d: %d visits, %d more than one level lower; want k=%d more", H, r.Visits(), r.Visits()-prev, k)
		}
		prev = r.Visits()
	}
}

// ---------------------------------------------------------------------------------------------
// Building
// ---------------------------------------------------------------------------------------------

// recordingStore records every Put and refuses to overwrite a node once a later one exists.
type recordingStore struct {
	*MemNodeStore
	t    testing.TB
	puts []uint64
	max  uint64
}

func (s *recordingStore) Put(j uint64, b []byte) error {
	if j < s.max {
		s.t.Fatalf("node %d put again after node %d", j, s.max)
	}
	s.max = max(s.max, j)
	s.puts = append(s.puts, j)
	return s.MemNodeStore.Put(j, b)
}

func TestBuildAppendOnly(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for _, cfg := range []Config{{K: 2, N: 3}, {K: 3, N: 2}, {K: 8, N: 1}} {
		cfg.BlockSize = BlockSizeFor(cfg.K, cfg.N)
		store := &recordingStore{MemNodeStore: NewMemNodeStore(), t: t}
		x, err := NewIndex(store, cfg)
		if err != nil {
			t.Fatal(err)
		}
		blocks := randomStream(rng, 300, 5)
		final := map[uint64][]byte{}
		for b, recs := range blocks {
			appendBlock(t, x, uint64(b), recs, true)
			// Every node before the last is full, sealed, and never changes again.
			for j := uint64(1); j < x.Nodes(); j++ {
				got, err := store.Get(j)
				if err != nil {
					t.Fatal(err)
				}
				if old, ok := final[j]; ok && !bytes.Equal(old, got) {
					t.Fatalf("k=%d n=%d: full node %d changed", cfg.K, cfg.N, j)
				}
				final[j] = got
				if nd := getNode(t, store, j); len(nd.Body) != cfg.N || nd.Open {
					t.Fatalf("node %d before the last has %d entries, open=%v", j, len(nd.Body), nd.Open)
				}
			}
		}
		if len(store.puts) != len(blocks) {
			t.Fatalf("%d puts for %d seals", len(store.puts), len(blocks))
		}
		// Every header entry is its child's subtree, by brute force over the records.
		h := x.Heap()
		for j := uint64(1); j <= x.Nodes(); j++ {
			nd := getNode(t, store, j)
			for c, cj := range h.Children(j) {
				f, l := h.Subtree(cj)
				var recs []Record
				for b := EntryBlock(cfg.N, f, 0); b < EntryBlock(cfg.N, l+1, 0); b++ {
					recs = append(recs, blocks[b]...)
				}
				if want := blockEntry(recs); nd.Header[c] != want {
					t.Fatalf("node %d header %d (child %d): %v, want %v", j, c, cj, nd.Header[c], want)
				}
			}
			for i, e := range nd.Body {
				if want := blockEntry(blocks[EntryBlock(cfg.N, j, i)]); e != want {
					t.Fatalf("node %d entry %d: %v, want %v", j, i, e, want)
				}
			}
		}
	}
}

func TestAppendRefusals(t *testing.T) {
	x, store := newIndex(t, Config{K: 2, N: 2, BlockSize: BlockSizeFor(2, 2)})
	if err := x.Seal(0); !errors.Is(err, ErrBlockOrder) {
		t.Fatalf("seal with no block: %v", err)
	}
	if err := x.Append(1, 10, 0); !errors.Is(err, ErrBlockOrder) {
		t.Fatalf("append to block 1 first: %v", err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(x.Append(0, 10, 1))
	must(x.Append(0, 10, 2)) // equal timestamps are allowed
	err := x.Append(0, 9, 3)
	if !errors.Is(err, ErrOutOfOrder) || !strings.Contains(err.Error(), "timestamp 9 is older than the last record's 10") {
		t.Fatalf("an older record: %v", err)
	}
	if err := x.Append(1, 11, 0); !errors.Is(err, ErrBlockOrder) || !strings.Contains(err.Error(), "data block 0 is open") {
		t.Fatalf("next block before sealing: %v", err)
	}
	if err := x.Seal(1); !errors.Is(err, ErrBlockOrder) {
		t.Fatalf("seal of the wrong block: %v", err)
	}
	must(x.Seal(0))
	if err := x.Seal(0); !errors.Is(err, ErrBlockOrder) {
		t.Fatalf("seal twice: %v", err)
	}
	if err := x.Append(0, 12, 0); !errors.Is(err, ErrBlockOrder) {
		t.Fatalf("append to a sealed block: %v", err)
	}
	if err := x.Append(1, 9, 0); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("an older record in a new block: %v", err)
	}
	must(x.Append(1, 10, 4)) // equal across blocks
	// Refused records changed nothing.
	last := x.Last()
	want := []Entry{
		{TsMin: 10, TsMax: 10, Summary: Summary{Count: 2, Sum: Int128Of(3), Min: 1, Max: 2}},
		{TsMin: 10, TsMax: 10, Summary: Summary{Count: 1, Sum: Int128Of(4), Min: 4, Max: 4}},
	}
	if !reflect.DeepEqual(last.Body, want) || !last.Open || x.Blocks() != 2 || !x.BlockOpen() {
		t.Fatalf("last node %+v, blocks %d", last, x.Blocks())
	}
	// The stored node is the one of the last seal.
	if nd := getNode(t, store, 1); len(nd.Body) != 1 || nd.Open {
		t.Fatalf("stored node 1: %+v", nd)
	}
}

// failingStore fails puts on demand.
type failingStore struct {
	*MemNodeStore
	fail bool
}

func (s *failingStore) Put(j uint64, b []byte) error {
	if s.fail {
		return errors.New("disk full")
	}
	return s.MemNodeStore.Put(j, b)
}

func TestSealRetriesAfterAFailedPut(t *testing.T) {
	store := &failingStore{MemNodeStore: NewMemNodeStore()}
	x, err := NewIndex(store, Config{K: 2, N: 2, BlockSize: BlockSizeFor(2, 2)})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Append(0, 1, 1); err != nil {
		t.Fatal(err)
	}
	store.fail = true
	if err := x.Seal(0); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("seal with a failing store: %v", err)
	}
	if !x.BlockOpen() || !x.Last().Open {
		t.Fatal("a failed seal closed the block")
	}
	store.fail = false
	if err := x.Seal(0); err != nil {
		t.Fatal(err)
	}
	if nd := getNode(t, store, 1); nd.Open {
		t.Fatal("the stored node is open after the seal")
	}
}

func TestOpenContinues(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	cfg := Config{K: 3, N: 2, BlockSize: BlockSizeFor(3, 2)}
	blocks := randomStream(rng, 120, 4)
	ref, _ := buildStream(t, cfg, blocks, false)

	// The same stream with a reopen every 17 blocks (after a Flush, so an open block too).
	x, store := newIndex(t, cfg)
	for b, recs := range blocks {
		appendBlock(t, x, uint64(b), recs[:len(recs)/2+1], false)
		if b%17 == 5 {
			if err := x.Flush(); err != nil {
				t.Fatal(err)
			}
			var err error
			if x, err = OpenIndex(store, cfg, x.Nodes()); err != nil {
				t.Fatal(err)
			}
		}
		appendBlock(t, x, uint64(b), recs[len(recs)/2+1:], b < len(blocks)-1)
	}
	if x.Nodes() != ref.Nodes() || x.Blocks() != ref.Blocks() || !reflect.DeepEqual(x.Last(), ref.Last()) {
		t.Fatalf("reopened index: %d nodes, %d blocks; reference %d, %d", x.Nodes(), x.Blocks(), ref.Nodes(), ref.Blocks())
	}
	for _, q := range queries(rng, blocks, 100) {
		a, err1 := x.Search(q[0], q[1])
		b, err2 := ref.Search(q[0], q[1])
		if err1 != nil || err2 != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("Search(%d, %d): reopened %+v %v, reference %+v %v", q[0], q[1], a, err1, b, err2)
		}
	}
	if err := x.Append(uint64(len(blocks)-1), 0, 0); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("the reopened index forgot the last timestamp: %v", err)
	}
	// Opening with another geometry, or more nodes than stored, fails.
	if _, err := OpenIndex(store, Config{K: 2, N: 2, BlockSize: BlockSizeFor(2, 2)}, x.Nodes()); !errors.Is(err, ErrMalformedNode) {
		t.Fatalf("open with k=2: %v", err)
	}
	if _, err := OpenIndex(store, cfg, x.Nodes()+1); err == nil {
		t.Fatal("open of a node that is not stored")
	}
	// A node before the last that is not full is refused when a search reads it.
	b1, _ := store.Get(1)
	nd, _ := UnmarshalNode(b1)
	nd.Body = nd.Body[:1]
	short, _ := MarshalNode(nd)
	_ = store.Put(1, short)
	if _, err := x.Search(blocks[0][0].TS, blocks[0][0].TS); !errors.Is(err, ErrMalformedNode) || !strings.Contains(err.Error(), "1 of 2 entries") {
		t.Fatalf("search through a short node: %v", err)
	}
}

func TestDefaultGeometry(t *testing.T) {
	cfg, err := Config{}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BlockSize != 16384 || cfg.K != 3 || cfg.N != 289 || BlockSizeFor(3, 289) != 16384 {
		t.Fatalf("default geometry %+v", cfg)
	}
	for _, bad := range []Config{
		{N: 290}, {N: -1}, {BlockSize: 100}, {BlockSize: MaxBlockSize + 1}, {K: 2, N: 3, BlockSize: BlockSizeFor(2, 3) - 1},
	} {
		if _, err := bad.Resolve(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if c, err := (Config{K: 8, BlockSize: 4096}).Resolve(); err != nil || c.N != (4096-32)/56-8 {
		t.Fatalf("k=8 in 4 KiB: %+v %v", c, err)
	}
}

// ---------------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------------

func TestMarshalRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	for _, cfg := range propertyConfigs {
		blocks := randomStream(rng, configBlocks(cfg)/4, 5)
		x, store := buildStream(t, cfg, blocks, false)
		if err := x.Flush(); err != nil {
			t.Fatal(err)
		}
		for j := uint64(1); j <= x.Nodes(); j++ {
			b, _ := store.Get(j)
			nd, err := UnmarshalNode(b)
			if err != nil {
				t.Fatal(err)
			}
			again, err := MarshalNode(nd)
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("node %d does not round-trip: %v", j, err)
			}
			if len(b) != x.Config().BlockSize {
				t.Fatalf("node %d is %d bytes", j, len(b))
			}
		}
		last, _ := UnmarshalNode(must(store.Get(x.Nodes())))
		if !reflect.DeepEqual(last, x.Last()) {
			t.Fatalf("the flushed last node decodes to %+v, want %+v", last, x.Last())
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// validInternal is node 3 of a binary heap with two body entries, its header summarizing
// children 1 and 2: a small valid block to corrupt.
func validInternal() *Node {
	e := func(lo, hi int64, vals ...int64) Entry {
		en := Entry{TsMin: lo, TsMax: hi}
		for _, v := range vals {
			en.Summary.Add(v)
		}
		return en
	}
	return &Node{
		Number: 3, K: 2, N: 2, BlockSize: BlockSizeFor(2, 2) + 8, Height: 1,
		Header: []Entry{e(1, 4, 1, 2), e(4, 6, 3, 4)},
		Body:   []Entry{e(7, 7, 5)},
	}
}

func TestUnmarshalRefuses(t *testing.T) {
	good := must(MarshalNode(validInternal()))
	if _, err := UnmarshalNode(good); err != nil {
		t.Fatal(err)
	}
	body := nodeFixed + 2*entrySize
	le := binary.LittleEndian
	for _, c := range []struct {
		name   string
		mutate func(b []byte) []byte
		fixCRC bool
		want   string
	}{
		{"empty", func(b []byte) []byte { return nil }, false, "shorter than"},
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }, false, "the block says it is 264 bytes, but it is 263"},
		{"extended", func(b []byte) []byte { return append(b, 0) }, false, "but it is 265"},
		{"version", func(b []byte) []byte { b[offVersion] = 2; return b }, true, "version 2"},
		{"checksum", func(b []byte) []byte { b[body+3] ^= 1; return b }, false, "checksum mismatch"},
		{"flags", func(b []byte) []byte { b[offFlags] = 2; return b }, true, "unknown flags"},
		{"reserved", func(b []byte) []byte { b[offRes2] = 1; return b }, true, "reserved"},
		{"node 0", func(b []byte) []byte { le.PutUint64(b[offNumber:], 0); return b }, true, "start at 1"},
		{"k=1", func(b []byte) []byte { le.PutUint16(b[offK:], 1); return b }, true, "fan-out k=1"},
		{"n=0", func(b []byte) []byte { le.PutUint32(b[offN:], 0); return b }, true, "n=0"},
		{"n too big", func(b []byte) []byte { le.PutUint32(b[offN:], 4); return b }, true, "need 368 bytes"},
		{"count 0", func(b []byte) []byte { le.PutUint32(b[offCount:], 0); return b }, true, "0 body entries"},
		{"count > n", func(b []byte) []byte { le.PutUint32(b[offCount:], 3); return b }, true, "3 body entries, want 1 to 2"},
		{"count > used", func(b []byte) []byte { le.PutUint32(b[offCount:], 2); return b }, true, "body entry 1: summarizes no records"},
		{"height", func(b []byte) []byte { b[offHeight] = 0; return b }, true, "height 0, but node 3"},
		{"leaf with header", func(b []byte) []byte { le.PutUint64(b[offNumber:], 4); b[offHeight] = 0; return b }, true, "non-zero header"},
		{"ts min > max", func(b []byte) []byte { le.PutUint64(b[body:], 8); return b }, true, "body entry 0: timestamp min 8 > max 7"},
		{"value min > max", func(b []byte) []byte { le.PutUint64(b[nodeFixed+40:], 3); return b }, true, "header entry 0: value min 3 > max 2"},
		{"sum", func(b []byte) []byte { le.PutUint64(b[nodeFixed+24:], 9); return b }, true, "sum 9 of 2 records outside"},
		{"one record", func(b []byte) []byte { le.PutUint64(b[body+48:], 6); return b }, true, "one record but min 5, max 6"},
		{"too few records", func(b []byte) []byte {
			le.PutUint64(b[nodeFixed+16:], 1)
			le.PutUint64(b[nodeFixed+24:], 1)
			le.PutUint64(b[nodeFixed+48:], 1)
			le.PutUint64(b[nodeFixed+8:], 1)
			return b
		}, true, "fewer than the 2 data blocks"},
		{"order", func(b []byte) []byte { le.PutUint64(b[body:], 5); le.PutUint64(b[body+8:], 5); return b }, true, "body entry 0 starts at 5, before header entry 1 ends at 6"},
		{"unused entry", func(b []byte) []byte { b[body+entrySize+5] = 1; return b }, true, "unused body entries"},
		{"padding", func(b []byte) []byte { b[len(b)-1] = 1; return b }, true, "padding"},
	} {
		b := c.mutate(slices.Clone(good))
		if c.fixCRC {
			le.PutUint32(b[offCRC:], checksum(b))
		}
		_, err := UnmarshalNode(b)
		if !errors.Is(err, ErrMalformedNode) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

func TestMarshalRefusesInvalid(t *testing.T) {
	for name, mutate := range map[string]func(nd *Node){
		"no body":     func(nd *Node) { nd.Body = nil },
		"header":      func(nd *Node) { nd.Header = nd.Header[:1] },
		"too small":   func(nd *Node) { nd.BlockSize = BlockSizeFor(2, 2) - 1 },
		"full body":   func(nd *Node) { nd.Body = append(nd.Body, nd.Body[0], nd.Body[0]) },
		"height":      func(nd *Node) { nd.Height = 2 },
		"empty entry": func(nd *Node) { nd.Body[0].Count = 0 },
	} {
		nd := validInternal()
		mutate(nd)
		if _, err := MarshalNode(nd); !errors.Is(err, ErrMalformedNode) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzUnmarshalNode: decoding never panics, and a block that decodes encodes back to the same
// bytes. Each input is also tried with its checksum fixed, so the checks behind it are fuzzed.
func FuzzUnmarshalNode(f *testing.F) {
	f.Add(must(MarshalNode(validInternal())))
	rng := rand.New(rand.NewSource(1))
	for _, cfg := range []Config{{K: 2, N: 2}, {K: 3, N: 1}} {
		cfg.BlockSize = BlockSizeFor(cfg.K, cfg.N)
		x, store := buildStream(f, cfg, randomStream(rng, 9, 3), false)
		_ = x.Flush()
		for j := uint64(1); j <= x.Nodes(); j++ {
			f.Add(must(store.Get(j)))
		}
	}
	f.Add([]byte{})
	f.Add(make([]byte, nodeFixed))
	f.Fuzz(func(t *testing.T, b []byte) {
		try := func(b []byte) {
			nd, err := UnmarshalNode(b)
			if err != nil {
				if !errors.Is(err, ErrMalformedNode) {
					t.Fatalf("error not wrapping ErrMalformedNode: %v", err)
				}
				return
			}
			again, err := MarshalNode(nd)
			if err != nil {
				t.Fatalf("a decoded node does not encode: %v", err)
			}
			if !bytes.Equal(again, b) {
				t.Fatalf("round trip changed the block")
			}
		}
		try(b)
		if len(b) >= nodeFixed {
			fixed := slices.Clone(b)
			binary.LittleEndian.PutUint32(fixed[offCRC:], checksum(fixed))
			try(fixed)
		}
	})
}

func TestInt128(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	edge := []int64{0, 1, -1, math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1}
	val := func() int64 {
		if rng.Intn(3) == 0 {
			return edge[rng.Intn(len(edge))]
		}
		return rng.Int63() - rng.Int63()
	}
	for range 2000 {
		a, b := val(), val()
		c := rng.Uint64()
		if rng.Intn(3) == 0 {
			c = []uint64{0, 1, math.MaxUint64}[rng.Intn(3)]
		}
		wantSum := new(big.Int).Add(big.NewInt(a), big.NewInt(b))
		if got := Int128Of(a).Add(Int128Of(b)).Big(); got.Cmp(wantSum) != 0 {
			t.Fatalf("%d + %d = %v, want %v", a, b, got, wantSum)
		}
		wantMul := new(big.Int).Mul(new(big.Int).SetUint64(c), big.NewInt(a))
		m := mulInt128(c, a)
		if m.Big().Cmp(wantMul) != 0 {
			t.Fatalf("%d · %d = %v, want %v", c, a, m.Big(), wantMul)
		}
		if got, want := m.Cmp(mulInt128(c, b)), wantMul.Cmp(new(big.Int).Mul(new(big.Int).SetUint64(c), big.NewInt(b))); got != want {
			t.Fatalf("Cmp(%d·%d, %d·%d) = %d, want %d", c, a, c, b, got, want)
		}
		v, ok := m.Int64()
		if ok != wantMul.IsInt64() || (ok && v != wantMul.Int64()) {
			t.Fatalf("Int64 of %v: %d %v", wantMul, v, ok)
		}
		if m.String() != wantMul.String() {
			t.Fatalf("String %s, want %s", m, wantMul)
		}
	}
	// A summary beyond int64 stays exact.
	var s Summary
	for range 4 {
		s.Add(math.MaxInt64)
	}
	if want := new(big.Int).Mul(big.NewInt(4), big.NewInt(math.MaxInt64)); s.Sum.Big().Cmp(want) != 0 || s.check() != nil {
		t.Fatalf("sum of 4·MaxInt64: %v (%v)", s.Sum, s.check())
	}
}

// ---------------------------------------------------------------------------------------------
// Traces
// ---------------------------------------------------------------------------------------------

// TestTraces replays the index traces in testdata/index:
//
//	new k=K n=N [size=BYTES]              an empty index (size defaults to the smallest block)
//	append block=B ts=(T, …) [value=(V, …)]  records of data block B (values default to 0)
//	seal block=B
//	block ts=(T, …) [value=(V, …)]        the next data block's records, then its seal
//	fill blocks=C [ts=T] [step=S] [records=R]  C more sealed blocks of R records each (default
//	                                       1), timestamps T, T+S, … (default: after the last),
//	                                       each record's value its timestamp
//	search tl=T th=T                      the blocks and the nodes read
//	aggregate tl=T th=T                   the inner summary, the edges, the total once the
//	                                       edges are read (checked against brute force)
//	peaks                                 the peaks, newest first
//	nodes                                 every node (the last from memory)
//	flush / reopen                        put the last node; reopen from the store
func TestTraces(t *testing.T) {
	datadriven.Walk(t, "testdata/index", func(t *testing.T, path string) {
		var (
			x      *Index
			cfg    Config
			store  *MemNodeStore
			blocks [][]Record
		)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			ints := func(key string, def int64) []int64 {
				a, ok := d.Arg(key)
				if !ok {
					return []int64{def}
				}
				var out []int64
				for _, s := range a.Vals {
					v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
					if err != nil {
						d.Fatalf(t, "%s: %v", key, err)
					}
					out = append(out, v)
				}
				return out
			}
			one := func(key string, def int64) int64 { return ints(key, def)[0] }
			if d.Cmd != "new" && x == nil {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			var out strings.Builder
			appendRecs := func(b uint64, ts, vals []int64) error {
				for i, ts := range ts {
					v := vals[min(i, len(vals)-1)]
					started, nodes := x.Blocks(), x.Nodes()
					if err := x.Append(b, ts, v); err != nil {
						return err
					}
					if x.Nodes() != nodes {
						nd := x.Last()
						fmt.Fprintf(&out, "new node %d (height %d)", nd.Number, nd.Height)
						if nd.Height > 0 {
							fmt.Fprintf(&out, ", header from children %v", x.Heap().Children(nd.Number))
						}
						out.WriteString("\n")
					}
					if x.Blocks() != started {
						j, i := BlockEntry(cfg.N, b)
						fmt.Fprintf(&out, "block %d -> node %d entry %d\n", b, j, i)
						blocks = append(blocks, nil)
					}
					blocks[b] = append(blocks[b], Record{TS: ts, Value: v})
				}
				return nil
			}
			fail := func(err error) string { return out.String() + "error: " + err.Error() }
			switch d.Cmd {
			case "new":
				k, n := int(one("k", 2)), int(one("n", 2))
				cfg = Config{K: k, N: n, BlockSize: int(one("size", int64(BlockSizeFor(k, n))))}
				store = NewMemNodeStore()
				var err error
				if x, err = NewIndex(store, cfg); err != nil {
					x = nil
					return fail(err)
				}
				cfg = x.Config()
				blocks = nil
				return fmt.Sprintf("k=%d n=%d, %d-byte index blocks", cfg.K, cfg.N, cfg.BlockSize)
			case "append":
				if err := appendRecs(uint64(one("block", 0)), ints("ts", 0), ints("value", 0)); err != nil {
					return fail(err)
				}
			case "seal":
				if err := x.Seal(uint64(one("block", 0))); err != nil {
					return fail(err)
				}
				fmt.Fprintf(&out, "sealed; node %d stored\n", x.Nodes())
			case "block":
				b := x.Blocks()
				if err := appendRecs(b, ints("ts", 0), ints("value", 0)); err != nil {
					return fail(err)
				}
				if err := x.Seal(b); err != nil {
					return fail(err)
				}
			case "fill":
				count, step, per := one("blocks", 1), one("step", 1), one("records", 1)
				next := int64(0)
				if len(blocks) > 0 {
					last := blocks[len(blocks)-1]
					next = last[len(last)-1].TS + step
				}
				ts := one("ts", next)
				first := x.Blocks()
				for range count {
					var tss []int64
					for range per {
						tss = append(tss, ts)
						ts += step
					}
					b := x.Blocks()
					if err := x.Append(b, tss[0], tss[0]); err != nil {
						return fail(err)
					}
					blocks = append(blocks, []Record{{tss[0], tss[0]}})
					for _, s := range tss[1:] {
						if err := x.Append(b, s, s); err != nil {
							return fail(err)
						}
						blocks[b] = append(blocks[b], Record{s, s})
					}
					if err := x.Seal(b); err != nil {
						return fail(err)
					}
				}
				fmt.Fprintf(&out, "blocks %d-%d, %d nodes\n", first, x.Blocks()-1, x.Nodes())
			case "search":
				tl, th := one("tl", 0), one("th", 0)
				r, err := x.Search(tl, th)
				if err != nil {
					return fail(err)
				}
				if r.Found {
					fmt.Fprintf(&out, "blocks %d-%d\n", r.First, r.Last)
				} else {
					out.WriteString("no blocks\n")
				}
				fmt.Fprintf(&out, "visited %d: %s\n", r.Visits(), nodeList(r.Visited))
			case "aggregate":
				tl, th := one("tl", 0), one("th", 0)
				g, err := x.Aggregate(tl, th)
				if err != nil {
					return fail(err)
				}
				if !g.Found {
					fmt.Fprintf(&out, "no blocks\nvisited %d: %s\n", len(g.Visited), nodeList(g.Visited))
					break
				}
				fmt.Fprintf(&out, "blocks %d-%d\ninner: %d blocks, %s\n", g.First, g.Last, g.InnerBlocks, g.Inner)
				var edges []Summary
				for _, b := range g.Edges {
					s := SummarizeRange(blocks[b], tl, th)
					edges = append(edges, s)
					fmt.Fprintf(&out, "edge block %d: %s\n", b, s)
				}
				total, err := g.Combine(edges...)
				if err != nil {
					return fail(err)
				}
				if want := bruteSummary(blocks, tl, th); total != want {
					d.Fatalf(t, "total %v, brute force %v", total, want)
				}
				fmt.Fprintf(&out, "total: %s\nvisited %d: %s\n", total, len(g.Visited), nodeList(g.Visited))
			case "peaks":
				h := x.Heap()
				for i, p := range h.Peaks(x.Nodes()) {
					f, _ := h.Subtree(p)
					if i > 0 {
						out.WriteString(" ")
					}
					fmt.Fprintf(&out, "N%d(nodes %d-%d)", p, f, p)
				}
				out.WriteString("\n")
			case "nodes":
				for j := uint64(1); j <= x.Nodes(); j++ {
					var nd *Node
					where := ""
					if j == x.Nodes() {
						nd, where = x.Last(), ", last (in memory)"
					} else {
						nd = getNode(t, store, j)
					}
					open := ""
					if nd.Open {
						open = ", open"
					}
					fmt.Fprintf(&out, "N%d height %d%s%s\n", j, nd.Height, where, open)
					for c, e := range nd.Header {
						cj := x.Heap().Children(j)[c]
						f, _ := x.Heap().Subtree(cj)
						fmt.Fprintf(&out, "  header %d (N%d-N%d): %s\n", c, f, cj, e)
					}
					for i, e := range nd.Body {
						fmt.Fprintf(&out, "  entry %d (block %d): %s\n", i, EntryBlock(nd.N, j, i), e)
					}
				}
			case "flush":
				if err := x.Flush(); err != nil {
					return fail(err)
				}
				fmt.Fprintf(&out, "node %d stored\n", x.Nodes())
			case "reopen":
				var err error
				if x, err = OpenIndex(store, cfg, x.Nodes()); err != nil {
					return fail(err)
				}
				fmt.Fprintf(&out, "%d nodes, %d blocks, open=%v\n", x.Nodes(), x.Blocks(), x.BlockOpen())
			default:
				d.Fatalf(t, "unknown command %s", d.Cmd)
			}
			if out.Len() == 0 {
				return "ok"
			}
			return strings.TrimSuffix(out.String(), "\n")
		})
	})
}

func nodeList(js []uint64) string {
	var parts []string
	for _, j := range js {
		parts = append(parts, fmt.Sprintf("N%d", j))
	}
	return strings.Join(parts, " ")
}
