package ycsb

import (
	"math/rand/v2"
	"strconv"
)

// OpKind is a YCSB operation type.
type OpKind uint8

// The operations of YCSB's CoreWorkload.
const (
	Read OpKind = iota
	Update
	Insert
	Scan
	ReadModifyWrite

	// NumOpKinds is the number of OpKinds, for arrays indexed by kind.
	NumOpKinds = 5
)

var opKindNames = [NumOpKinds]string{"read", "update", "insert", "scan", "rmw"}

func (k OpKind) String() string {
	if int(k) < len(opKindNames) {
		return opKindNames[k]
	}
	return "OpKind(" + strconv.Itoa(int(k)) + ")"
}

// Op is one operation for a client to perform (CoreWorkload.doTransaction's choice).
//
// Key and Value alias buffers owned by the Generator that returned the Op: they are valid until
// that Generator's next Next or Load call and must not be modified. Copy them to keep them.
type Op struct {
	Kind OpKind
	// KeyNum is the record number the key was built from (for Scan, the start record).
	KeyNum uint64
	// Key is the record key, "user" + number (see KeyName); for Scan, the start key.
	Key []byte
	// Value is the value to write for Update, Insert and ReadModifyWrite (nil otherwise):
	// ValueBytes random printable bytes, as YCSB's RandomByteIterator makes them. Update and
	// ReadModifyWrite write the whole record (YCSB's writeallfields=true): a Meridian value is
	// opaque, so YCSB's default single-field update has no equivalent.
	Value []byte
	// ScanLength is the number of records a Scan reads, 1..MaxScanLength.
	ScanLength int
}

// Shared is the state all clients of one run share: the insert key counter, with
// AcknowledgedCounterGenerator semantics (the request distributions, "latest" included, only
// pick keys whose insert has been acknowledged), and the distributions, built once — so a
// zipfian's ζ is computed once per run, not once per client. It is safe for concurrent use.
type Shared struct {
	w          Workload
	valueBytes int

	ack *AckCounter

	// keyChooser is shared by all generators (its Next only reads it), except for the
	// latest distribution, where each generator clones latest.
	keyChooser NumberGenerator
	latest     *SkewedLatest
	scanLength NumberGenerator

	// opKinds and opWeights are YCSB's DiscreteGenerator over the operations with a positive
	// proportion, in YCSB's order (read, update, insert, scan, rmw), weights normalised.
	opKinds   []OpKind
	opWeights []float64
}

// NewShared prepares a run of w, as CoreWorkload.init does: the insert key sequence starts at
// RecordCount (acknowledged up to RecordCount-1, the loaded records) and the key chooser is
//
//	uniform  UniformLongGenerator(0, RecordCount-1)
//	zipfian  ScrambledZipfianGenerator(0, RecordCount + OperationCount·InsertProportion·2)
//	hotspot  HotspotIntegerGenerator(0, RecordCount-1, HotspotDataFraction, HotspotOpnFraction)
//	latest   SkewedLatestGenerator(insert key sequence)
//
// It panics if w.Validate() fails: validate first.
func NewShared(w Workload) *Shared {
	if err := w.Validate(); err != nil {
		panic(err.Error())
	}
	s := &Shared{
		w:          w,
		valueBytes: w.ValueBytes(),
		ack:        NewAckCounter(uint64(w.RecordCount)),
	}
	records := uint64(w.RecordCount)
	switch w.RequestDistribution {
	case DistUniform:
		s.keyChooser = NewUniform(0, records-1)
	case DistZipfian:
		// CoreWorkload: keychooser = new ScrambledZipfianGenerator(insertstart,
		// insertstart + insertcount + expectednewkeys) — note the inclusive upper bound.
		s.keyChooser = NewScrambledZipfianConstant(0, records+w.expectedNewKeys(), w.ZipfianConstant)
	case DistHotspot:
		s.keyChooser = NewHotspot(0, records-1, w.HotspotDataFraction, w.HotspotOpnFraction)
	case DistLatest:
		s.latest = newSkewedLatest(s.ack, w.ZipfianConstant)
	}
	if w.ScanLengthDistribution == DistZipfian {
		s.scanLength = NewZipfian(1, uint64(w.MaxScanLength), DefaultZipfianConstant)
	} else {
		s.scanLength = NewUniform(1, uint64(w.MaxScanLength))
	}
	sum := 0.0
	for k := range OpKind(NumOpKinds) {
		if p := w.Proportion(k); p > 0 {
			s.opKinds = append(s.opKinds, k)
			s.opWeights = append(s.opWeights, p)
			sum += p
		}
	}
	for i := range s.opWeights {
		s.opWeights[i] /= sum
	}
	return s
}

// Workload is the workload this run was prepared for.
func (s *Shared) Workload() Workload { return s.w }

// Inserts is the run's insert key sequence (keys RecordCount, RecordCount+1, ...).
func (s *Shared) Inserts() *AckCounter { return s.ack }

// Generator is one client thread's stream of operations, with its own random source. It is not
// safe for concurrent use: make one per client with [Shared.NewGenerator].
type Generator struct {
	s          *Shared
	r          *rand.Rand
	keyChooser NumberGenerator
	ordered    bool
	padding    int
	keyBuf     []byte
	valueBuf   []byte
}

// NewGenerator returns a client's generator, its random source seeded from seed (give each
// client its own seed).
func (s *Shared) NewGenerator(seed uint64) *Generator {
	g := &Generator{
		s:          s,
		r:          rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		keyChooser: s.keyChooser,
		ordered:    s.w.OrderedInserts,
		padding:    s.w.ZeroPadding,
		keyBuf:     make([]byte, 0, 48),
		valueBuf:   make([]byte, s.valueBytes),
	}
	if s.latest != nil {
		g.keyChooser = s.latest.clone()
	}
	return g
}

// Next returns the next operation (CoreWorkload.doTransaction): the kind drawn with the
// workload's proportions, the key from the request distribution — redrawn, as YCSB's
// nextKeynum does, until it is one whose insert has been acknowledged — or, for Insert, the
// next key of the shared insert sequence. It does not allocate; the Op's Key and Value are
// valid until the next call (see [Op]).
//
// After an Insert completes, call Acknowledge with it.
func (g *Generator) Next() Op {
	switch kind := g.chooseOp(); kind {
	case Insert:
		n := g.s.ack.Next()
		return Op{Kind: Insert, KeyNum: n, Key: g.key(n), Value: g.value()}
	case Scan:
		n := g.nextKeynum()
		return Op{Kind: Scan, KeyNum: n, Key: g.key(n), ScanLength: int(g.s.scanLength.Next(g.r))}
	case Update, ReadModifyWrite:
		n := g.nextKeynum()
		return Op{Kind: kind, KeyNum: n, Key: g.key(n), Value: g.value()}
	default:
		n := g.nextKeynum()
		return Op{Kind: Read, KeyNum: n, Key: g.key(n)}
	}
}

// Acknowledge reports that an Insert returned by Next has completed, making its key visible to
// the request distributions of every client (AcknowledgedCounterGenerator.acknowledge). Call it
// exactly once per run-phase Insert, as YCSB does whether or not the insert succeeded: an
// insert that is never acknowledged stops later inserts from becoming readable. Ops of other
// kinds, and load-phase inserts from Load, are ignored. It panics on an insert acknowledged
// twice or when more than AckWindow inserts are outstanding (see [AckCounter.Acknowledge]).
func (g *Generator) Acknowledge(op Op) {
	if op.Kind != Insert || op.KeyNum < uint64(g.s.w.RecordCount) {
		return
	}
	g.s.ack.Acknowledge(op.KeyNum)
}

// Load returns the load-phase insert of record i (0 ≤ i < RecordCount; YCSB's doInsert), with
// key and value in the generator's buffers as for Next. Load inserts need no Acknowledge.
func (g *Generator) Load(i int) Op {
	n := uint64(i)
	return Op{Kind: Insert, KeyNum: n, Key: g.key(n), Value: g.value()}
}

// chooseOp is DiscreteGenerator.nextValue() over the operation proportions.
func (g *Generator) chooseOp() OpKind {
	val := g.r.Float64()
	w := g.s.opWeights
	for i, pw := range w {
		if val < pw {
			return g.s.opKinds[i]
		}
		val -= pw
	}
	return g.s.opKinds[len(w)-1] // rounding; YCSB throws "oops. should not get here."
}

// nextKeynum is CoreWorkload.nextKeynum: draw until the key is at most the highest
// acknowledged insert.
func (g *Generator) nextKeynum() uint64 {
	for {
		k := g.keyChooser.Next(g.r)
		if last := g.s.ack.Last(); last >= 0 && k <= uint64(last) {
			return k
		}
	}
}

func (g *Generator) key(n uint64) []byte {
	g.keyBuf = AppendKeyName(g.keyBuf[:0], n, g.ordered, g.padding)
	return g.keyBuf
}

func (g *Generator) value() []byte {
	fillRandomValue(g.r, g.valueBuf)
	return g.valueBuf
}

// fillRandomValue fills b as YCSB's RandomByteIterator does: each 32-bit random number gives
// six printable characters, ' ' plus 5, 6, 7, 5, 6 and 7 of its bits (masks 31, 63, 95). The
// bits come from a SplitMix64 stream seeded from r once per value, which is several times
// cheaper than r for a 1 KB value and plenty random for payload bytes.
func fillRandomValue(r *rand.Rand, b []byte) {
	state := r.Uint64()
	i := 0
	for ; i+12 <= len(b); i += 12 {
		// SplitMix64 (Steele, Lea and Flood, OOPSLA 2014).
		state += 0x9e3779b97f4a7c15
		x := state
		x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
		x = (x ^ (x >> 27)) * 0x94d049bb133111eb
		x ^= x >> 31
		c := b[i : i+12 : i+12]
		lo, hi := uint32(x), uint32(x>>32)
		c[0] = byte(lo&31) + ' '
		c[1] = byte((lo>>5)&63) + ' '
		c[2] = byte((lo>>10)&95) + ' '
		c[3] = byte((lo>>15)&31) + ' '
		c[4] = byte((lo>>20)&63) + ' '
		c[5] = byte((lo>>25)&95) + ' '
		c[6] = byte(hi&31) + ' '
		c[7] = byte((hi>>5)&63) + ' '
		c[8] = byte((hi>>10)&95) + ' '
		c[9] = byte((hi>>15)&31) + ' '
		c[10] = byte((hi>>20)&63) + ' '
		c[11] = byte((hi>>25)&95) + ' '
	}
	for i < len(b) {
		var t [6]byte
		put6(t[:], r.Uint32())
		i += copy(b[i:], t[:])
	}
}

func put6(b []byte, x uint32) {
	_ = b[5]
	b[0] = byte(x&31) + ' '
	b[1] = byte((x>>5)&63) + ' '
	b[2] = byte((x>>10)&95) + ' '
	b[3] = byte((x>>15)&31) + ' '
	b[4] = byte((x>>20)&63) + ' '
	b[5] = byte((x>>25)&95) + ' '
}
