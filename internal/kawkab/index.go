package kawkab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/big"
	"math/bits"
	"slices"
	"sort"
)

// ---------------------------------------------------------------------------------------------
// Post-order heap geometry (5.5.1, Fig. 5.5)
// ---------------------------------------------------------------------------------------------

// Heap is the geometry of a k-ary post-order heap (thesis 5.5.1, Fig. 5.5): index nodes are
// numbered 1, 2, 3, … in post-order — the k children of a node, left to right, are created
// before it — so the heap grows bottom-up and a node is never changed by the nodes that come
// after it. The first N nodes form a forest of perfect k-ary trees, the peaks, of
// non-increasing height from left to right: N is written greedily as a sum of perfect-tree
// sizes S(h) = (k^(h+1) − 1)/(k − 1), at most k−1 trees of each height except that the
// lowest height may have k (the next node is then their parent).
//
// Everything is computed from node numbers in O(log_k N) steps; no addresses are stored.
// Node numbers start at 1, as in the figures; passing 0 is a programming error and panics.
type Heap struct {
	k uint64
	// sizes[h] is S(h), the number of nodes of a perfect tree of height h (a leaf has height
	// 0), for every h whose S(h) fits in a uint64.
	sizes []uint64
}

// MaxK is the largest fan-out a node's encoding can describe.
const MaxK = math.MaxUint16

// NewHeap returns the geometry of a k-ary post-order heap; k must be at least 2.
func NewHeap(k int) (Heap, error) {
	if k < 2 || k > MaxK {
		return Heap{}, fmt.Errorf("kawkab: index fan-out k=%d, want 2 to %d", k, MaxK)
	}
	h := Heap{k: uint64(k)}
	s := uint64(1)
	for {
		h.sizes = append(h.sizes, s)
		if s > (math.MaxUint64-1)/h.k {
			break
		}
		s = s*h.k + 1
	}
	return h, nil
}

// K is the heap's fan-out.
func (h Heap) K() int { return int(h.k) }

// Size is S(height), the number of nodes of a perfect k-ary tree of that height, or
// math.MaxUint64 if it does not fit in a uint64.
func (h Heap) Size(height int) uint64 {
	if height < 0 {
		return 0
	}
	if height >= len(h.sizes) {
		return math.MaxUint64
	}
	return h.sizes[height]
}

func mustNode(j uint64) {
	if j == 0 {
		panic("kawkab: index node numbers start at 1")
	}
}

// Height is the height of node j (a leaf has height 0). Node j is the newest node of the
// forest of the first j nodes, so it is that forest's last peak: the smallest tree of the
// greedy decomposition of j.
func (h Heap) Height(j uint64) int {
	mustNode(j)
	rem := j
	t := len(h.sizes) - 1
	for {
		for h.sizes[t] > rem {
			t--
		}
		rem %= h.sizes[t]
		if rem == 0 {
			return t
		}
	}
}

// Children are node j's k children, left to right (oldest first), or nil for a leaf. The
// children of a node of height t are the roots of k consecutive trees of height t−1 that end
// just before it: the last is j−1, and each one before is S(t−1) nodes earlier.
func (h Heap) Children(j uint64) []uint64 {
	t := h.Height(j)
	if t == 0 {
		return nil
	}
	out := make([]uint64, h.k)
	for i := range out {
		out[i] = h.child(j, t, i)
	}
	return out
}

// child is the i-th child (0-based, left to right) of node j of height t > 0.
func (h Heap) child(j uint64, t, i int) uint64 {
	return j - 1 - (h.k-1-uint64(i))*h.sizes[t-1]
}

// Subtree is the range of nodes [first, last] of the subtree rooted at j: a perfect tree of
// S(height(j)) nodes that ends at j.
func (h Heap) Subtree(j uint64) (first, last uint64) {
	s := h.sizes[h.Height(j)]
	return j - s + 1, j
}

// Peaks are the roots of the forest of the first n nodes, newest first (the order in which a
// search walks them, 5.5.3): n itself, then the roots of ever older — and never smaller —
// trees. There are at most (k−1)·(H+1)+1 of them, H being the height of the oldest.
func (h Heap) Peaks(n uint64) []uint64 {
	var roots []uint64
	h.eachLevel(n, func(end, size, count uint64, _ int) bool {
		for ; count > 0; count-- {
			end += size
			roots = append(roots, end)
		}
		return true
	})
	slices.Reverse(roots)
	return roots
}

// eachLevel calls f, for each height t that the forest of n nodes has trees of, from the
// tallest down, with the node before the first of them (end), their size and their count
// (the greedy decomposition of n), until f returns false.
func (h Heap) eachLevel(n uint64, f func(end, size, count uint64, t int) bool) {
	rem, end := n, uint64(0)
	for t := len(h.sizes) - 1; t >= 0 && rem > 0; t-- {
		s := h.sizes[t]
		if c := rem / s; c > 0 {
			if !f(end, s, c, t) {
				return
			}
			end += c * s
			rem -= c * s
		}
	}
}

// IsRoot reports whether node j is the root of one of the trees of the forest of the first n
// nodes (a peak); false when j is 0 or after n. O(log_k n), however many peaks there are.
func (h Heap) IsRoot(j, n uint64) bool {
	if j == 0 || j > n {
		return false
	}
	found := false
	h.eachLevel(n, func(end, size, count uint64, _ int) bool {
		if j > end+size*count {
			return true // after this level's trees
		}
		found = (j-end)%size == 0
		return false
	})
	return found
}

// ---------------------------------------------------------------------------------------------
// Index entries and the corrected entry formula (5.5.1)
// ---------------------------------------------------------------------------------------------

// EntryBlock is the data block described by body entry i (0-based) of index node j (1-based)
// in an index whose nodes hold n body entries: (j−1)·n + i, data blocks numbered from 0.
//
// Thesis 5.5.1 says that entry e_ij, "the i-th index entry in the j-th index block, maps to
// data block number i × j". That is a typo: i × j is not one-to-one (e_{1,2} and e_{2,1}
// would both describe data block 2) and not in append order (e_{n,1} = n comes before
// e_{1,2} = 2 although entries are appended in time order). The right mapping follows from
// the structure: every index block, leaf or internal, has a body of exactly n entries (the
// header of Fig. 5.6 is separate and describes subtrees, not data blocks); an entry is
// appended for each new data block, in data-block order (5.5.2: "each time a new data block
// is created … partially fills the last index entry"); and a new index block is started only
// when the last one is full. So index blocks 1 … j−1 hold exactly (j−1)·n entries, for data
// blocks 1 … (j−1)·n, and e_ij is the ((j−1)·n + i)-th entry of the index: with the thesis's
// 1-based i, j and block numbers, e_ij describes data block (j−1)·n + i; with everything
// 0-based, j·n + i. This package numbers index nodes from 1, as Figs. 5.5 and 5.7 do, and
// entries and data blocks from 0 (a data block's number is its first record's number divided
// by the records per block), hence (j−1)·n + i.
func EntryBlock(n int, j uint64, i int) uint64 {
	mustNode(j)
	return (j-1)*uint64(n) + uint64(i)
}

// BlockEntry is the inverse of EntryBlock: the index node (1-based) and body entry (0-based)
// that describe data block b (0-based).
func BlockEntry(n int, b uint64) (j uint64, i int) {
	return b/uint64(n) + 1, int(b % uint64(n))
}

// Int128 is a signed 128-bit integer (two's complement: Hi holds the sign), the type of
// summed values, so that a sum over any number of int64 values (fewer than 2^64) is exact.
type Int128 struct {
	Hi int64
	Lo uint64
}

// Int128Of is v as an Int128.
func Int128Of(v int64) Int128 { return Int128{Hi: v >> 63, Lo: uint64(v)} }

// Add is a + b (wrapping at 2^128, which sums of fewer than 2^64 int64 values never reach).
func (a Int128) Add(b Int128) Int128 {
	lo, carry := bits.Add64(a.Lo, b.Lo, 0)
	return Int128{Hi: a.Hi + b.Hi + int64(carry), Lo: lo}
}

// Cmp is −1, 0 or +1 as a is less than, equal to or greater than b.
func (a Int128) Cmp(b Int128) int {
	switch {
	case a.Hi < b.Hi:
		return -1
	case a.Hi > b.Hi:
		return 1
	case a.Lo < b.Lo:
		return -1
	case a.Lo > b.Lo:
		return 1
	}
	return 0
}

// Int64 is a as an int64, and whether it fits.
func (a Int128) Int64() (int64, bool) {
	v := int64(a.Lo)
	return v, a.Hi == v>>63
}

// Big is a as a big.Int.
func (a Int128) Big() *big.Int {
	b := new(big.Int).SetInt64(a.Hi)
	b.Lsh(b, 64)
	return b.Add(b, new(big.Int).SetUint64(a.Lo))
}

func (a Int128) String() string {
	if v, ok := a.Int64(); ok {
		return fmt.Sprint(v)
	}
	return a.Big().String()
}

// mulInt128 is c·v exactly (|c·v| < 2^127 for any uint64 c and int64 v).
func mulInt128(c uint64, v int64) Int128 {
	if v >= 0 {
		hi, lo := bits.Mul64(c, uint64(v))
		return Int128{Hi: int64(hi), Lo: lo}
	}
	hi, lo := bits.Mul64(c, uint64(^v)+1) // |v|, also for math.MinInt64
	lo, borrow := bits.Sub64(0, lo, 0)
	hi, _ = bits.Sub64(0, hi, borrow)
	return Int128{Hi: int64(hi), Lo: lo}
}

// Summary summarizes a numeric value of a set of records (beyond the thesis: issue 20's
// summary index): how many records, the sum, the minimum and the maximum of the value. The
// value is an int64 the caller derives from each record (a field at a fixed offset, say). Min
// and Max mean nothing when Count is 0.
type Summary struct {
	Count    uint64
	Sum      Int128
	Min, Max int64
}

// Add adds a record's value.
func (s *Summary) Add(v int64) {
	if s.Count == 0 || v < s.Min {
		s.Min = v
	}
	if s.Count == 0 || v > s.Max {
		s.Max = v
	}
	s.Count++
	s.Sum = s.Sum.Add(Int128Of(v))
}

// Merge is the summary of the records of s and o together.
func (s Summary) Merge(o Summary) Summary {
	switch {
	case o.Count == 0:
		return s
	case s.Count == 0:
		return o
	}
	out := Summary{Count: s.Count + o.Count, Sum: s.Sum.Add(o.Sum), Min: min(s.Min, o.Min), Max: max(s.Max, o.Max)}
	return out
}

func (s Summary) String() string {
	if s.Count == 0 {
		return "count=0"
	}
	return fmt.Sprintf("count=%d sum=%s min=%d max=%d", s.Count, s.Sum, s.Min, s.Max)
}

// check validates a summary of at least one record.
func (s Summary) check() error {
	switch {
	case s.Count == 0:
		return errors.New("summarizes no records")
	case s.Min > s.Max:
		return fmt.Errorf("value min %d > max %d", s.Min, s.Max)
	case s.Count == 1 && (s.Min != s.Max || s.Sum != Int128Of(s.Min)):
		return fmt.Errorf("one record but min %d, max %d, sum %s", s.Min, s.Max, s.Sum)
	case s.Sum.Cmp(mulInt128(s.Count, s.Min)) < 0 || s.Sum.Cmp(mulInt128(s.Count, s.Max)) > 0:
		return fmt.Errorf("sum %s of %d records outside [%d·min, %d·max] with min %d, max %d",
			s.Sum, s.Count, s.Count, s.Count, s.Min, s.Max)
	}
	return nil
}

// Record is what the index needs of a record: its timestamp (the first 8 bytes of every
// record, 5.2) and the value the summaries are over.
type Record struct {
	TS, Value int64
}

// SummarizeRange is the summary of the records with timestamps in [tl, th] — what a caller
// computes for an edge data block of an Aggregation after reading it.
func SummarizeRange(recs []Record, tl, th int64) Summary {
	var s Summary
	for _, r := range recs {
		if r.TS >= tl && r.TS <= th {
			s.Add(r.Value)
		}
	}
	return s
}

// Entry is an index entry: the minimum and maximum timestamps of a data block's records (a
// body entry, 5.4.2) or of a child's subtree (a header entry, Fig. 5.6), with the summary of
// their values.
type Entry struct {
	TsMin, TsMax int64
	Summary
}

// Then is the entry of e's records followed by o's (o is newer).
func (e Entry) Then(o Entry) Entry {
	return Entry{TsMin: e.TsMin, TsMax: o.TsMax, Summary: e.Summary.Merge(o.Summary)}
}

func (e Entry) String() string {
	return fmt.Sprintf("ts=[%d,%d] %s", e.TsMin, e.TsMax, e.Summary)
}

func (e Entry) check() error {
	if e.TsMin > e.TsMax {
		return fmt.Errorf("timestamp min %d > max %d", e.TsMin, e.TsMax)
	}
	if err := e.Summary.check(); err != nil {
		return err
	}
	if e.Count == 1 && e.TsMin != e.TsMax {
		return fmt.Errorf("one record but timestamps [%d, %d]", e.TsMin, e.TsMax)
	}
	return nil
}

// ---------------------------------------------------------------------------------------------
// Node encoding (5.4.2, Fig. 5.6)
// ---------------------------------------------------------------------------------------------

// The binary layout of an index block (little-endian, fixed size):
//
//	offset  size  field
//	0       1     version (1)
//	1       1     flags: bit 0 = the last body entry's data block is still open (not sealed)
//	2       1     height of the node in the heap (0 = leaf)
//	3       1     reserved, 0
//	4       2     k, the fan-out
//	6       2     reserved, 0
//	8       4     n, the body's capacity in entries
//	12      4     count, the body entries in use (1 … n)
//	16      4     size of the block in bytes
//	20      4     CRC-32C (Castagnoli) of the whole block, this field taken as zero
//	24      8     the node's number j (1-based post-order position)
//	32      56·k  header: one entry per child subtree, left to right (all zero in a leaf)
//	…       56·n  body: one entry per data block, count used, the rest zero
//	…             zero padding up to the block size
//
// An entry is 56 bytes: timestamp min (int64), timestamp max (int64), count (uint64), sum
// low 64 bits (uint64), sum high 64 bits (int64), value min (int64), value max (int64). The
// node's own number and height are stored only to check it against its position (a block
// read back from the wrong place is refused); no other block's address is stored (5.5.1).
// Every unused byte must be zero, so a valid block has exactly one encoding.
const (
	nodeVersion = 1
	nodeFixed   = 32
	entrySize   = 56
	flagOpen    = 1

	offVersion = 0
	offFlags   = 1
	offHeight  = 2
	offRes1    = 3
	offK       = 4
	offRes2    = 6
	offN       = 8
	offCount   = 12
	offSize    = 16
	offCRC     = 20
	offNumber  = 24

	// DefaultBlockSize is the size of an index block, the thesis's 16 KB (5.4.1).
	DefaultBlockSize = 16 << 10
	// DefaultK is the default fan-out. A search for old data walks up to (k−1)·(H+1)+1 peaks
	// and descends H levels, H ≈ log_k N, about k·log_k N = (k/ln k)·ln N blocks, least
	// near k = e: 3 (2.73·ln N) beats 2 and 4 (2.89·ln N). With 16 KiB blocks, k = 3 leaves
	// room for exactly n = 289 body entries (32 + 56·(3+289) = 16384).
	DefaultK = 3
	// MaxBlockSize bounds a block's size.
	MaxBlockSize = 16 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrMalformedNode is wrapped by every error for an index block that does not decode or is
// inconsistent.
var ErrMalformedNode = errors.New("malformed index block")

// BlockSizeFor is the smallest block that holds a node with fan-out k and n body entries.
func BlockSizeFor(k, n int) int { return nodeFixed + entrySize*(k+n) }

// Node is a decoded index block: a node of the post-order heap (Fig. 5.6).
type Node struct {
	Number    uint64 // post-order position j, from 1
	K         int    // fan-out
	N         int    // body capacity, entries
	BlockSize int    // encoded size, bytes
	Height    int    // 0 for a leaf
	Open      bool   // the last body entry's data block is not sealed yet
	// Header holds, for an internal node, one entry per child, left to right: the
	// timestamps and summary of the child's whole subtree. Nil for a leaf.
	Header []Entry
	// Body holds one entry per data block, oldest first: 1 … N entries; entry i describes
	// data block EntryBlock(N, Number, i).
	Body []Entry
}

// first is the oldest part of the node's subtree, last the newest: the subtree's time range
// is [first().TsMin, last().TsMax].
func (nd *Node) first() Entry {
	if len(nd.Header) > 0 {
		return nd.Header[0]
	}
	return nd.Body[0]
}

func (nd *Node) last() Entry { return nd.Body[len(nd.Body)-1] }

// SubtreeEntry is the entry of the node's whole subtree: its children's subtrees, then its
// own body — what its parent's header holds for it.
func (nd *Node) SubtreeEntry() Entry {
	e := nd.first()
	for i := 1; i < len(nd.Header)+len(nd.Body); i++ {
		if i < len(nd.Header) {
			e = e.Then(nd.Header[i])
		} else {
			e = e.Then(nd.Body[i-len(nd.Header)])
		}
	}
	return e
}

func malformed(j uint64, format string, args ...any) error {
	return fmt.Errorf("kawkab: index block %d: %s: %w", j, fmt.Sprintf(format, args...), ErrMalformedNode)
}

// Validate checks a node: its geometry fits its block size, its height is its number's, its
// header has k entries exactly when it is internal, its body 1 … n, every entry is a
// non-empty time range with a consistent summary, and the entries (header, then body) are in
// time order.
func (nd *Node) Validate() error {
	j := nd.Number
	if j == 0 {
		return malformed(j, "node numbers start at 1")
	}
	if nd.K < 2 || nd.K > MaxK {
		return malformed(j, "fan-out k=%d, want 2 to %d", nd.K, MaxK)
	}
	if nd.N < 1 || nd.N > math.MaxUint32 {
		return malformed(j, "body capacity n=%d, want 1 to %d", nd.N, uint64(math.MaxUint32))
	}
	if nd.BlockSize > MaxBlockSize || nd.BlockSize < BlockSizeFor(nd.K, nd.N) {
		return malformed(j, "k=%d and n=%d need %d bytes; block size %d (at most %d)",
			nd.K, nd.N, BlockSizeFor(nd.K, nd.N), nd.BlockSize, MaxBlockSize)
	}
	heap, err := NewHeap(nd.K)
	if err != nil {
		return malformed(j, "%v", err)
	}
	if h := heap.Height(j); h != nd.Height {
		return malformed(j, "height %d, but node %d of a %d-ary post-order heap has height %d", nd.Height, j, nd.K, h)
	}
	if want := min(nd.Height, 1) * nd.K; len(nd.Header) != want {
		return malformed(j, "%d header entries for a node of height %d, want %d", len(nd.Header), nd.Height, want)
	}
	if len(nd.Body) < 1 || len(nd.Body) > nd.N {
		return malformed(j, "%d body entries, want 1 to %d", len(nd.Body), nd.N)
	}
	if nd.Height > 0 {
		// Every data block holds at least one record, so a child's subtree of S(h−1) full
		// nodes summarizes at least S(h−1)·n records.
		hi, lo := bits.Mul64(heap.Size(nd.Height-1), uint64(nd.N))
		for i, e := range nd.Header {
			if err := e.check(); err != nil {
				return malformed(j, "header entry %d: %v", i, err)
			}
			if hi == 0 && e.Count < lo {
				return malformed(j, "header entry %d summarizes %d records, fewer than the %d data blocks of the child's subtree", i, e.Count, lo)
			}
		}
	}
	for i, e := range nd.Body {
		if err := e.check(); err != nil {
			return malformed(j, "body entry %d: %v", i, err)
		}
	}
	// Time order: header entries, then body entries, each starting at or after the previous
	// one's end (equal timestamps may span entries).
	name := func(i int) string {
		if i < len(nd.Header) {
			return fmt.Sprintf("header entry %d", i)
		}
		return fmt.Sprintf("body entry %d", i-len(nd.Header))
	}
	at := func(i int) Entry {
		if i < len(nd.Header) {
			return nd.Header[i]
		}
		return nd.Body[i-len(nd.Header)]
	}
	for i := 1; i < len(nd.Header)+len(nd.Body); i++ {
		if prev, e := at(i-1), at(i); e.TsMin < prev.TsMax {
			return malformed(j, "%s starts at %d, before %s ends at %d", name(i), e.TsMin, name(i-1), prev.TsMax)
		}
	}
	return nil
}

func putEntry(b []byte, e Entry) {
	binary.LittleEndian.PutUint64(b[0:], uint64(e.TsMin))
	binary.LittleEndian.PutUint64(b[8:], uint64(e.TsMax))
	binary.LittleEndian.PutUint64(b[16:], e.Count)
	binary.LittleEndian.PutUint64(b[24:], e.Sum.Lo)
	binary.LittleEndian.PutUint64(b[32:], uint64(e.Sum.Hi))
	binary.LittleEndian.PutUint64(b[40:], uint64(e.Min))
	binary.LittleEndian.PutUint64(b[48:], uint64(e.Max))
}

func getEntry(b []byte) Entry {
	return Entry{
		TsMin: int64(binary.LittleEndian.Uint64(b[0:])),
		TsMax: int64(binary.LittleEndian.Uint64(b[8:])),
		Summary: Summary{
			Count: binary.LittleEndian.Uint64(b[16:]),
			Sum:   Int128{Lo: binary.LittleEndian.Uint64(b[24:]), Hi: int64(binary.LittleEndian.Uint64(b[32:]))},
			Min:   int64(binary.LittleEndian.Uint64(b[40:])),
			Max:   int64(binary.LittleEndian.Uint64(b[48:])),
		},
	}
}

// checksum is the CRC-32C of a block with its checksum field taken as zero.
func checksum(b []byte) uint32 {
	var zero [4]byte
	c := crc32.Update(0, castagnoli, b[:offCRC])
	c = crc32.Update(c, castagnoli, zero[:])
	return crc32.Update(c, castagnoli, b[offCRC+4:])
}

// MarshalNode encodes a valid node as a block of nd.BlockSize bytes.
func MarshalNode(nd *Node) ([]byte, error) {
	if err := nd.Validate(); err != nil {
		return nil, err
	}
	b := make([]byte, nd.BlockSize)
	b[offVersion] = nodeVersion
	if nd.Open {
		b[offFlags] = flagOpen
	}
	b[offHeight] = byte(nd.Height)
	binary.LittleEndian.PutUint16(b[offK:], uint16(nd.K))
	binary.LittleEndian.PutUint32(b[offN:], uint32(nd.N))
	binary.LittleEndian.PutUint32(b[offCount:], uint32(len(nd.Body)))
	binary.LittleEndian.PutUint32(b[offSize:], uint32(nd.BlockSize))
	binary.LittleEndian.PutUint64(b[offNumber:], nd.Number)
	for i, e := range nd.Header {
		putEntry(b[nodeFixed+i*entrySize:], e)
	}
	body := nodeFixed + nd.K*entrySize
	for i, e := range nd.Body {
		putEntry(b[body+i*entrySize:], e)
	}
	binary.LittleEndian.PutUint32(b[offCRC:], checksum(b))
	return b, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// UnmarshalNode decodes and validates an index block. Every malformed block — wrong size,
// unknown version or flags, bad checksum, a geometry that does not fit, bad counts, a height
// that is not its number's, an entry with min > max or an impossible summary, entries out of
// time order, non-zero unused bytes — is refused with an error wrapping ErrMalformedNode.
func UnmarshalNode(b []byte) (*Node, error) {
	const j = 0 // the node's number is not known (or trusted) until the checksum matches
	if len(b) < nodeFixed {
		return nil, malformed(j, "%d bytes, shorter than the %d-byte block header", len(b), nodeFixed)
	}
	if len(b) > MaxBlockSize {
		return nil, malformed(j, "%d bytes, longer than the largest block (%d)", len(b), MaxBlockSize)
	}
	if v := b[offVersion]; v != nodeVersion {
		return nil, malformed(j, "version %d, this build reads version %d", v, nodeVersion)
	}
	if size := binary.LittleEndian.Uint32(b[offSize:]); uint64(size) != uint64(len(b)) {
		return nil, malformed(j, "the block says it is %d bytes, but it is %d", size, len(b))
	}
	if stored, computed := binary.LittleEndian.Uint32(b[offCRC:]), checksum(b); stored != computed {
		return nil, malformed(j, "checksum mismatch: stored %#08x, computed %#08x", stored, computed)
	}
	nd := &Node{
		Number:    binary.LittleEndian.Uint64(b[offNumber:]),
		K:         int(binary.LittleEndian.Uint16(b[offK:])),
		N:         int(binary.LittleEndian.Uint32(b[offN:])),
		BlockSize: len(b),
		Height:    int(b[offHeight]),
		Open:      b[offFlags]&flagOpen != 0,
	}
	jn := nd.Number
	if f := b[offFlags] &^ flagOpen; f != 0 {
		return nil, malformed(jn, "unknown flags %#02x", f)
	}
	if b[offRes1] != 0 || b[offRes2] != 0 || b[offRes2+1] != 0 {
		return nil, malformed(jn, "reserved header bytes are not zero")
	}
	if jn == 0 {
		return nil, malformed(jn, "node numbers start at 1")
	}
	if nd.K < 2 {
		return nil, malformed(jn, "fan-out k=%d, want at least 2", nd.K)
	}
	if nd.N < 1 {
		return nil, malformed(jn, "body capacity n=0")
	}
	if need := BlockSizeFor(nd.K, nd.N); need > len(b) {
		return nil, malformed(jn, "k=%d and n=%d need %d bytes, the block has %d", nd.K, nd.N, need, len(b))
	}
	count := int(binary.LittleEndian.Uint32(b[offCount:]))
	if count < 1 || count > nd.N {
		return nil, malformed(jn, "%d body entries, want 1 to %d", count, nd.N)
	}
	heap, _ := NewHeap(nd.K)
	if h := heap.Height(jn); h != nd.Height {
		return nil, malformed(jn, "height %d, but node %d of a %d-ary post-order heap has height %d", nd.Height, jn, nd.K, h)
	}
	header := b[nodeFixed : nodeFixed+nd.K*entrySize]
	if nd.Height == 0 {
		if !allZero(header) {
			return nil, malformed(jn, "a leaf with a non-zero header")
		}
	} else {
		nd.Header = make([]Entry, nd.K)
		for i := range nd.Header {
			nd.Header[i] = getEntry(header[i*entrySize:])
		}
	}
	body := b[nodeFixed+nd.K*entrySize:]
	nd.Body = make([]Entry, count)
	for i := range nd.Body {
		nd.Body[i] = getEntry(body[i*entrySize:])
	}
	if !allZero(body[count*entrySize : nd.N*entrySize]) {
		return nil, malformed(jn, "unused body entries are not zero")
	}
	if !allZero(body[nd.N*entrySize:]) {
		return nil, malformed(jn, "padding after the body is not zero")
	}
	if err := nd.Validate(); err != nil {
		return nil, err
	}
	return nd, nil
}

// ---------------------------------------------------------------------------------------------
// Building the index (5.5.2)
// ---------------------------------------------------------------------------------------------

// NodeStore keeps a stream's encoded index blocks by node number, so that they can live in a
// buffer cache or on disk. Put takes ownership of the block (the index never changes it
// afterwards); Get's result must not be modified. The index puts only its last node, which it
// puts again as it changes; once a node is full and its last data block sealed, the index
// never puts it again (nodes are append-only, 5.5.1).
type NodeStore interface {
	Get(j uint64) ([]byte, error)
	Put(j uint64, block []byte) error
}

// MemNodeStore is an in-memory NodeStore, not safe for concurrent use.
type MemNodeStore struct {
	blocks map[uint64][]byte
}

// NewMemNodeStore returns an empty in-memory store.
func NewMemNodeStore() *MemNodeStore { return &MemNodeStore{blocks: map[uint64][]byte{}} }

// Get returns block j.
func (m *MemNodeStore) Get(j uint64) ([]byte, error) {
	b, ok := m.blocks[j]
	if !ok {
		return nil, fmt.Errorf("kawkab: index block %d is not in the store", j)
	}
	return b, nil
}

// Put stores block j.
func (m *MemNodeStore) Put(j uint64, block []byte) error {
	m.blocks[j] = block
	return nil
}

// Len is the number of blocks stored.
func (m *MemNodeStore) Len() int { return len(m.blocks) }

// Config sizes an index.
type Config struct {
	// BlockSize is an index block's size in bytes; 0 means DefaultBlockSize (16 KiB).
	BlockSize int
	// K is the fan-out; 0 means DefaultK.
	K int
	// N is the number of body entries per node; 0 means as many as BlockSize holds after the
	// k header entries. A non-zero N must fit.
	N int
}

// Resolve fills the defaults in and validates the geometry.
func (c Config) Resolve() (Config, error) {
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.K == 0 {
		c.K = DefaultK
	}
	if c.K < 2 || c.K > MaxK {
		return c, fmt.Errorf("kawkab: index fan-out k=%d, want 2 to %d", c.K, MaxK)
	}
	if c.BlockSize < BlockSizeFor(c.K, 1) || c.BlockSize > MaxBlockSize {
		return c, fmt.Errorf("kawkab: index block size %d, want %d (a header of k=%d entries and one body entry) to %d",
			c.BlockSize, BlockSizeFor(c.K, 1), c.K, MaxBlockSize)
	}
	room := (c.BlockSize - BlockSizeFor(c.K, 0)) / entrySize
	switch {
	case c.N == 0:
		c.N = room
	case c.N < 0 || c.N > room:
		return c, fmt.Errorf("kawkab: %d body entries per index block, a %d-byte block with k=%d holds 1 to %d",
			c.N, c.BlockSize, c.K, room)
	}
	return c, nil
}

// ErrOutOfOrder is wrapped by the error for a record older than the last one appended.
var ErrOutOfOrder = errors.New("timestamps must not decrease")

// ErrBlockOrder is wrapped by the error for an append or seal to the wrong data block.
var ErrBlockOrder = errors.New("data blocks are appended in order")

// Index is a stream's time index (5.5): the k-ary post-order heap of index blocks, built as
// records are appended (5.5.2) and searched backwards from the last block (5.5.3). Only the
// last node changes; it is held in memory and put to the store whenever a data block is
// sealed (and by Flush). An Index is not safe for concurrent use.
type Index struct {
	cfg    Config
	heap   Heap
	store  NodeStore
	nodes  uint64 // N, the number of nodes
	last   *Node  // node N, nil while N = 0
	blocks uint64 // data blocks started
	open   bool   // data block blocks−1 is not sealed
	lastTS int64  // timestamp of the last record appended
	// final holds decoded nodes before the last (they never change) for searches; its own
	// lock makes it safe for concurrent searches. nil: none are kept (the stream engine sets
	// it, DecodedNodeCache; an Index on its own reads and checks every node it visits).
	final *nodeLRU
}

// KeepDecodedNodes makes the index keep up to n decoded final nodes for its searches, as the
// stream engine's indexes do (DecodedNodeCache); 0 stops keeping them. Call it before the
// index is shared.
func (x *Index) KeepDecodedNodes(n int) { x.final = newNodeLRU(n) }

// NewIndex returns an empty index whose nodes go to store (which should be empty).
func NewIndex(store NodeStore, cfg Config) (*Index, error) {
	cfg, err := cfg.Resolve()
	if err != nil {
		return nil, err
	}
	heap, err := NewHeap(cfg.K)
	if err != nil {
		return nil, err
	}
	return &Index{cfg: cfg, heap: heap, store: store}, nil
}

// OpenIndex returns the index of nodes blocks already in store (as its last Seal or Flush left
// them); the last of them becomes the node that changes. No address is stored anywhere: the
// caller knows the number of nodes from the stream's length (B data blocks have ⌈B/n⌉).
func OpenIndex(store NodeStore, cfg Config, nodes uint64) (*Index, error) {
	x, err := NewIndex(store, cfg)
	if err != nil || nodes == 0 {
		return x, err
	}
	nd, err := x.load(nodes, true)
	if err != nil {
		return nil, err
	}
	x.nodes, x.last = nodes, nd
	x.blocks = EntryBlock(x.cfg.N, nodes, len(nd.Body))
	x.open = nd.Open
	x.lastTS = nd.last().TsMax
	return x, nil
}

// Config is the index's resolved configuration.
func (x *Index) Config() Config { return x.cfg }

// Heap is the index's heap geometry.
func (x *Index) Heap() Heap { return x.heap }

// Nodes is the number of index blocks.
func (x *Index) Nodes() uint64 { return x.nodes }

// Blocks is the number of data blocks started.
func (x *Index) Blocks() uint64 { return x.blocks }

// BlockOpen reports whether the last data block is still open (not sealed).
func (x *Index) BlockOpen() bool { return x.open }

// Last is a copy of the last node (nil for an empty index).
func (x *Index) Last() *Node {
	if x.last == nil {
		return nil
	}
	c := *x.last
	c.Header = append([]Entry(nil), x.last.Header...)
	c.Body = append([]Entry(nil), x.last.Body...)
	return &c
}

// load reads node j back from the store and checks that it is node j of this index: a node
// before the last must be full and sealed.
func (x *Index) load(j uint64, last bool) (*Node, error) {
	if !last && j < x.nodes {
		if nd := x.final.get(j); nd != nil {
			return nd, nil
		}
	}
	b, err := x.store.Get(j)
	if err != nil {
		return nil, fmt.Errorf("kawkab: read index block %d: %w", j, err)
	}
	nd, err := UnmarshalNode(b)
	if err != nil {
		return nil, err
	}
	switch {
	case nd.Number != j:
		return nil, malformed(j, "the store returned block %d", nd.Number)
	case nd.K != x.cfg.K || nd.N != x.cfg.N || nd.BlockSize != x.cfg.BlockSize:
		return nil, malformed(j, "k=%d, n=%d, %d bytes; the index has k=%d, n=%d, %d bytes",
			nd.K, nd.N, nd.BlockSize, x.cfg.K, x.cfg.N, x.cfg.BlockSize)
	case !last && (len(nd.Body) != nd.N || nd.Open):
		return nil, malformed(j, "%d of %d entries (open=%v), but later blocks follow it", len(nd.Body), nd.N, nd.Open)
	}
	if !last && j < x.nodes {
		x.final.add(nd) // final: it never changes
	}
	return nd, nil
}

// Append adds a record of data block b with timestamp ts and summarized value v. b is either
// the open data block — the record extends its entry's maximum timestamp and summary — or,
// when the last data block is sealed, the next one: the record starts its entry (a partial
// entry, 5.5.2), in a new index block if the last one is full. (The thesis starts the next
// index block as soon as the last is full; here it starts with its first entry, so that no
// node is ever empty.) Timestamps must not decrease; equal timestamps are allowed, also
// across data blocks. A refused record changes nothing.
func (x *Index) Append(b uint64, ts, v int64) error {
	switch {
	case x.open && b == x.blocks-1:
	case !x.open && b == x.blocks:
	case x.open:
		return fmt.Errorf("kawkab: append to data block %d: data block %d is open, seal it first: %w", b, x.blocks-1, ErrBlockOrder)
	default:
		return fmt.Errorf("kawkab: append to data block %d: the next data block is %d: %w", b, x.blocks, ErrBlockOrder)
	}
	if x.blocks > 0 && ts < x.lastTS {
		return fmt.Errorf("kawkab: append to data block %d: timestamp %d is older than the last record's %d: %w", b, ts, x.lastTS, ErrOutOfOrder)
	}
	if x.open {
		e := &x.last.Body[len(x.last.Body)-1]
		e.TsMax = ts
		e.Summary.Add(v)
		x.lastTS = ts
		return nil
	}
	if x.last == nil || len(x.last.Body) == x.cfg.N {
		if err := x.startNode(); err != nil {
			return err
		}
	}
	var s Summary
	s.Add(v)
	x.last.Body = append(x.last.Body, Entry{TsMin: ts, TsMax: ts, Summary: s})
	x.last.Open = true
	x.blocks++
	x.open = true
	x.lastTS = ts
	return nil
}

// startNode starts node N+1. If it is internal, its header is filled from its children's
// subtrees, read back through the store (5.5.2); its children are full and never change.
func (x *Index) startNode() error {
	j := x.nodes + 1
	nd := &Node{Number: j, K: x.cfg.K, N: x.cfg.N, BlockSize: x.cfg.BlockSize, Height: x.heap.Height(j)}
	if nd.Height > 0 {
		nd.Header = make([]Entry, x.cfg.K)
		for i := range nd.Header {
			c := x.heap.child(j, nd.Height, i)
			child, err := x.load(c, false)
			if err != nil {
				return fmt.Errorf("kawkab: start index block %d: child %d: %w", j, c, err)
			}
			nd.Header[i] = child.SubtreeEntry()
		}
	}
	x.nodes, x.last = j, nd
	return nil
}

// Seal completes the entry of data block b, the open one (its last record's timestamp is the
// entry's maximum, 5.5.2), and puts the last node to the store. If the put fails, the block
// stays open and Seal can be called again.
func (x *Index) Seal(b uint64) error {
	if !x.open || b != x.blocks-1 {
		if !x.open {
			return fmt.Errorf("kawkab: seal data block %d: no data block is open: %w", b, ErrBlockOrder)
		}
		return fmt.Errorf("kawkab: seal data block %d: the open data block is %d: %w", b, x.blocks-1, ErrBlockOrder)
	}
	x.last.Open = false
	if err := x.Flush(); err != nil {
		x.last.Open = true
		return err
	}
	x.open = false
	return nil
}

// Flush puts the last node to the store as it is (its last entry possibly open).
func (x *Index) Flush() error {
	if x.last == nil {
		return nil
	}
	b, err := MarshalNode(x.last)
	if err != nil {
		return err
	}
	if err := x.store.Put(x.nodes, b); err != nil {
		return fmt.Errorf("kawkab: write index block %d: %w", x.nodes, err)
	}
	return nil
}

// ---------------------------------------------------------------------------------------------
// Search (5.5.3) and aggregates
// ---------------------------------------------------------------------------------------------

// SearchResult is the answer of Search.
type SearchResult struct {
	// Found reports whether any data block may hold records in the range; then First and
	// Last are the data blocks that may, inclusive.
	Found       bool
	First, Last uint64
	// Visited are the index nodes the search read, in the order it first read them.
	Visited []uint64
}

// Visits is the number of index blocks the search read.
func (r SearchResult) Visits() int { return len(r.Visited) }

// searcher reads nodes for one search, each at most once, and remembers the order.
type searcher struct {
	x     *Index
	cache []*Node
	peaks []uint64
}

func (s *searcher) node(j uint64) (*Node, error) {
	for _, nd := range s.cache {
		if nd.Number == j {
			return nd, nil
		}
	}
	nd := s.x.last
	if j != s.x.nodes {
		var err error
		if nd, err = s.x.load(j, false); err != nil {
			return nil, err
		}
	}
	s.cache = append(s.cache, nd)
	return nd, nil
}

func (s *searcher) visited() []uint64 {
	out := make([]uint64, len(s.cache))
	for i, nd := range s.cache {
		out[i] = nd.Number
	}
	return out
}

func inconsistent(nd *Node, what string) error {
	return malformed(nd.Number, "its header does not match its children: %s", what)
}

// findLast finds the newest data block whose first record is at or before th — the last
// block that may hold records in [tl, th] — walking the peaks newest first and descending
// only into a subtree whose range starts at or before th (5.5.3). ok is false when no block
// overlaps [tl, th]: then the newest block starting at or before th ends before tl, and the
// descent stops as soon as a range (a body entry, or a child's in a header) says so.
func (s *searcher) findLast(tl, th int64) (b uint64, e Entry, ok bool, err error) {
	for _, p := range s.peaks {
		nd, err := s.node(p)
		if err != nil {
			return 0, Entry{}, false, err
		}
		if nd.first().TsMin > th {
			continue // the whole tree is after th: an older tree, then
		}
		for {
			i := sort.Search(len(nd.Body), func(i int) bool { return nd.Body[i].TsMin > th }) - 1
			if i >= 0 {
				if nd.Body[i].TsMax < tl {
					return 0, Entry{}, false, nil
				}
				return EntryBlock(nd.N, nd.Number, i), nd.Body[i], true, nil
			}
			c := sort.Search(len(nd.Header), func(c int) bool { return nd.Header[c].TsMin > th }) - 1
			if c < 0 {
				return 0, Entry{}, false, inconsistent(nd, fmt.Sprintf("its subtree starts at or before %d, no part of it does", th))
			}
			if nd.Header[c].TsMax < tl {
				return 0, Entry{}, false, nil
			}
			if nd, err = s.node(s.x.heap.child(nd.Number, nd.Height, c)); err != nil {
				return 0, Entry{}, false, err
			}
		}
	}
	return 0, Entry{}, false, nil
}

// findFirst finds the oldest data block whose last record is at or after tl. Walking the
// peaks newest first, it is in the oldest tree that ends at or after tl; the walk stops at a
// tree that ends before tl, or at one that starts before tl (every older tree ends at or
// before that start). Equal timestamps can span blocks, so a tree that starts exactly at tl
// does not stop it. The caller has found a last block, so there is a first one.
func (s *searcher) findFirst(tl int64) (uint64, Entry, error) {
	var nd *Node
	for _, p := range s.peaks {
		pn, err := s.node(p)
		if err != nil {
			return 0, Entry{}, err
		}
		if pn.last().TsMax < tl {
			break
		}
		nd = pn
		if pn.first().TsMin < tl {
			break
		}
	}
	if nd == nil {
		return 0, Entry{}, errors.New("kawkab: index search: no block ends at or after the low bound, but one starts before the high bound")
	}
	for {
		if c := sort.Search(len(nd.Header), func(c int) bool { return nd.Header[c].TsMax >= tl }); c < len(nd.Header) {
			var err error
			if nd, err = s.node(s.x.heap.child(nd.Number, nd.Height, c)); err != nil {
				return 0, Entry{}, err
			}
			continue
		}
		i := sort.Search(len(nd.Body), func(i int) bool { return nd.Body[i].TsMax >= tl })
		if i == len(nd.Body) {
			return 0, Entry{}, inconsistent(nd, fmt.Sprintf("its subtree ends at or after %d, no part of it does", tl))
		}
		return EntryBlock(nd.N, nd.Number, i), nd.Body[i], nil
	}
}

// search is Search, also returning the entries of the first and last blocks and the
// searcher (its nodes) for Aggregate.
func (x *Index) search(tl, th int64) (r SearchResult, first, last Entry, s *searcher, err error) {
	if tl > th {
		return r, first, last, nil, fmt.Errorf("kawkab: search [%d, %d]: the low bound is after the high bound", tl, th)
	}
	s = &searcher{x: x}
	if x.nodes == 0 {
		return r, first, last, s, nil
	}
	s.peaks = x.heap.Peaks(x.nodes)
	r.Last, last, r.Found, err = s.findLast(tl, th)
	if err == nil && r.Found {
		r.First, first, err = s.findFirst(tl)
	}
	r.Visited = s.visited()
	if err != nil {
		return SearchResult{Visited: r.Visited}, first, last, s, err
	}
	return r, first, last, s, nil
}

// Search returns the range of data blocks [First, Last] that may hold records with
// timestamps in [tl, th] (5.5.3): every block whose [min, max] timestamps overlap [tl, th].
// As timestamps never decrease these are consecutive, and include every block that holds
// such a record; a block at either edge may hold none (its records straddle a bound).
// Records with one timestamp may span several blocks: all of them are returned (a search for
// [t, t] returns every block holding t).
//
// The search starts at the last node and walks the peaks in descending order, descending
// into a subtree only when its range in a header says the answer is there — first for the
// last block, then for the first — and reads each node at most once. A search whose answer
// lies in the last node's body, and whose low bound is after the start of the last node's
// range, reads only the last node. In general it reads at most P + 2·H nodes, P ≤
// (k−1)·(H+1)+1 being the number of peaks and H the height of the tallest.
func (x *Index) Search(tl, th int64) (SearchResult, error) {
	r, _, _, _, err := x.search(tl, th)
	return r, err
}

// Aggregation is the answer of Aggregate.
type Aggregation struct {
	// Found, First and Last are Search's answer.
	Found       bool
	First, Last uint64
	// Inner summarizes the records of the InnerBlocks data blocks wholly inside [tl, th]
	// (every record's timestamp in it), answered from index entries and headers alone.
	Inner       Summary
	InnerBlocks uint64
	// Edges are the data blocks (none, one or two of First and Last, ascending) that straddle
	// a bound: the caller reads them, summarizes their records in [tl, th]
	// (SummarizeRange) and passes the summaries to Combine.
	Edges []uint64
	// Visited are the index nodes read, in order; the same nodes Search reads.
	Visited []uint64
}

// Combine is the summary of all records in [tl, th]: Inner and the summaries of the Edges'
// records in range, in the order of Edges.
func (g Aggregation) Combine(edges ...Summary) (Summary, error) {
	if len(edges) != len(g.Edges) {
		return Summary{}, fmt.Errorf("kawkab: aggregate: %d edge summaries for %d edge blocks", len(edges), len(g.Edges))
	}
	s := g.Inner
	for _, e := range edges {
		s = s.Merge(e)
	}
	return s, nil
}

// Aggregate summarizes the records with timestamps in [tl, th] (beyond the thesis: issue 20's
// summary index). It searches as Search does; the blocks strictly between First and Last lie
// wholly inside [tl, th], and so do First and Last when their entries say so. Their summary
// comes from body entries and, for every subtree wholly inside, the header entry of its
// parent (or, for a peak, its own entries) — from the nodes the search read, no others.
// The blocks at the edges that straddle a bound are left to the caller (Edges, Combine).
func (x *Index) Aggregate(tl, th int64) (Aggregation, error) {
	r, fe, le, s, err := x.search(tl, th)
	g := Aggregation{Found: r.Found, First: r.First, Last: r.Last, Visited: r.Visited}
	if err != nil || !r.Found {
		return g, err
	}
	inside := func(e Entry) bool { return e.TsMin >= tl && e.TsMax <= th }
	a, b := r.First, r.Last+1 // the inner blocks [a, b)
	if !inside(fe) {
		a++
		g.Edges = append(g.Edges, r.First)
	}
	if !inside(le) {
		b--
		if r.Last != r.First {
			g.Edges = append(g.Edges, r.Last)
		}
	}
	if a < b {
		g.InnerBlocks = b - a
		for _, p := range s.peaks {
			lo, hi := x.subtreeBlocks(p)
			if hi <= a || lo >= b {
				continue
			}
			nd, err := s.node(p)
			if err != nil {
				return g, err
			}
			part, err := s.summarize(nd, lo, hi, a, b)
			if err != nil {
				return g, err
			}
			g.Inner = g.Inner.Merge(part)
		}
	}
	g.Visited = s.visited()
	return g, nil
}

// subtreeBlocks is the range of data blocks [lo, hi) of node j's subtree.
func (x *Index) subtreeBlocks(j uint64) (lo, hi uint64) {
	f, _ := x.heap.Subtree(j)
	lo = EntryBlock(x.cfg.N, f, 0)
	hi = EntryBlock(x.cfg.N, j+1, 0)
	return lo, min(hi, x.blocks)
}

// summarize is the summary of the blocks [a, b) in node nd's subtree, which covers [lo, hi).
func (s *searcher) summarize(nd *Node, lo, hi, a, b uint64) (Summary, error) {
	if a <= lo && hi <= b {
		return nd.SubtreeEntry().Summary, nil
	}
	var sum Summary
	for c := range nd.Header {
		cj := s.x.heap.child(nd.Number, nd.Height, c)
		clo, chi := s.x.subtreeBlocks(cj)
		switch {
		case chi <= a || clo >= b:
		case a <= clo && chi <= b:
			sum = sum.Merge(nd.Header[c].Summary)
		default:
			cn, err := s.node(cj)
			if err != nil {
				return Summary{}, err
			}
			part, err := s.summarize(cn, clo, chi, a, b)
			if err != nil {
				return Summary{}, err
			}
			sum = sum.Merge(part)
		}
	}
	for i, e := range nd.Body {
		if blk := EntryBlock(nd.N, nd.Number, i); blk >= a && blk < b {
			sum = sum.Merge(e.Summary)
		}
	}
	return sum, nil
}
