package ycsb

import (
	"bytes"
	"math"
	"sync"
	"testing"
)

func TestOpKindString(t *testing.T) {
	want := []string{"read", "update", "insert", "scan", "rmw"}
	for k := range OpKind(NumOpKinds) {
		if k.String() != want[k] {
			t.Errorf("OpKind(%d).String() = %q, want %q", k, k.String(), want[k])
		}
	}
	if s := OpKind(9).String(); s != "OpKind(9)" {
		t.Errorf("OpKind(9).String() = %q", s)
	}
}

// 100,000 operations of each core workload have the proportions of its YCSB file within 1%,
// and every operation is well formed.
func TestCoreWorkloadOpMix(t *testing.T) {
	const ops = 100_000
	for _, name := range CoreNames {
		w, _ := Core(name)
		s := NewShared(w)
		g := s.NewGenerator(42)
		var counts [NumOpKinds]int
		scanSum := 0
		for range ops {
			op := g.Next()
			counts[op.Kind]++
			if want := AppendKeyName(nil, op.KeyNum, w.OrderedInserts, w.ZeroPadding); !bytes.Equal(op.Key, want) {
				t.Fatalf("%s: %s key %q for keynum %d, want %q", name, op.Kind, op.Key, op.KeyNum, want)
			}
			switch op.Kind {
			case Insert:
				if op.KeyNum < uint64(w.RecordCount) {
					t.Fatalf("%s: insert of loaded record %d", name, op.KeyNum)
				}
				if len(op.Value) != w.ValueBytes() {
					t.Fatalf("%s: insert value %d bytes", name, len(op.Value))
				}
				g.Acknowledge(op)
			case Update, ReadModifyWrite:
				if len(op.Value) != w.ValueBytes() {
					t.Fatalf("%s: %s value %d bytes", name, op.Kind, len(op.Value))
				}
			case Read:
				if op.Value != nil {
					t.Fatalf("%s: read with a value", name)
				}
			case Scan:
				if op.ScanLength < 1 || op.ScanLength > w.MaxScanLength {
					t.Fatalf("%s: scan length %d", name, op.ScanLength)
				}
				scanSum += op.ScanLength
			}
			if op.Kind != Insert && int64(op.KeyNum) > s.Inserts().Last() {
				t.Fatalf("%s: %s of key %d beyond the acknowledged %d", name, op.Kind, op.KeyNum, s.Inserts().Last())
			}
		}
		for k := range OpKind(NumOpKinds) {
			got := float64(counts[k]) / ops
			if math.Abs(got-w.Proportion(k)) > 0.01 {
				t.Errorf("workload %s: %s proportion %.4f, want %.4f", name, k, got, w.Proportion(k))
			}
		}
		if counts[Scan] > 0 {
			// Uniform 1..100 for workload E.
			if mean := float64(scanSum) / float64(counts[Scan]); math.Abs(mean-50.5) > 1 {
				t.Errorf("workload %s: mean scan length %.2f, want 50.5", name, mean)
			}
		}
	}
}

func TestCustomMixDistributions(t *testing.T) {
	const ops = 200_000
	// Hotspot through the generator: 80% of reads on the first 20% of record numbers.
	w, err := ParseMix("read=1,dist=hotspot,records=10000")
	if err != nil {
		t.Fatal(err)
	}
	g := NewShared(w).NewGenerator(1)
	hot := 0
	for range ops {
		if op := g.Next(); op.KeyNum < 2000 {
			hot++
		} else if op.KeyNum >= 10000 {
			t.Fatalf("hotspot read of record %d", op.KeyNum)
		}
	}
	if got := float64(hot) / ops; math.Abs(got-0.8) > 0.01 {
		t.Errorf("hot fraction %.4f, want 0.8", got)
	}

	// Uniform: every record about equally often, none beyond the loaded ones.
	w, _ = ParseMix("update=1,dist=uniform,records=100,fieldcount=1,fieldlength=8")
	g = NewShared(w).NewGenerator(2)
	var counts [100]int
	for range ops {
		op := g.Next()
		if op.KeyNum >= 100 || len(op.Value) != 8 {
			t.Fatalf("op %+v", op)
		}
		counts[op.KeyNum]++
	}
	for k, c := range counts {
		if math.Abs(float64(c)-ops/100)/(ops/100) > 0.15 {
			t.Errorf("uniform: record %d drawn %d times, want ~%d", k, c, ops/100)
		}
	}

	// Zipfian scan lengths favour short scans.
	w, _ = ParseMix("scan=1,dist=uniform,maxscan=100,scandist=zipfian")
	g = NewShared(w).NewGenerator(3)
	short := 0
	for range 10000 {
		op := g.Next()
		if op.ScanLength < 1 || op.ScanLength > 100 {
			t.Fatalf("scan length %d", op.ScanLength)
		}
		if op.ScanLength == 1 {
			short++
		}
	}
	if short < 1000 {
		t.Errorf("zipfian scan length 1 drawn %d of 10000 times", short)
	}

	// Ordered inserts name keys by record number.
	w, _ = ParseMix("insert=1,order=ordered,records=10")
	g = NewShared(w).NewGenerator(4)
	if op := g.Next(); op.KeyNum != 10 || string(op.Key) != "user10" {
		t.Errorf("first ordered insert %d %q, want 10 user10", op.KeyNum, op.Key)
	}
}

// Clients inserting and reading concurrently: inserted keys are new, and reads (latest for D,
// zipfian for E) only pick loaded or acknowledged keys.
func TestConcurrentInsertsAndAcknowledgement(t *testing.T) {
	for _, name := range []string{"d", "e"} {
		w, _ := Core(name)
		w.InsertProportion, w.ReadProportion, w.ScanProportion = 0.3, 0.7*w.ReadProportion/0.95, 0.7*w.ScanProportion/0.95
		s := NewShared(w)
		loaded := make(map[string]bool, w.RecordCount)
		for i := range w.RecordCount {
			loaded[string(w.LoadKey(i))] = true
		}
		const clients, ops = 8, 20000
		var (
			inserted sync.Map // key name → keynum
			acked    sync.Map // keynum → true
			wg       sync.WaitGroup
			mu       sync.Mutex
			inserts  int
		)
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g := s.NewGenerator(uint64(c))
				var held []Op
				mine := 0
				for i := range ops {
					op := g.Next()
					switch op.Kind {
					case Insert:
						mine++
						key := string(op.Key)
						if loaded[key] {
							t.Errorf("insert of loaded key %s", key)
						}
						if prev, dup := inserted.LoadOrStore(key, op.KeyNum); dup {
							t.Errorf("key %s inserted twice (keynums %v, %d)", key, prev, op.KeyNum)
						}
						// Hold some acknowledgements back so they complete out of order.
						held = append(held, Op{Kind: Insert, KeyNum: op.KeyNum})
						if i%3 != 0 {
							for _, h := range held {
								acked.Store(h.KeyNum, true)
								g.Acknowledge(h)
							}
							held = held[:0]
						}
					default:
						if op.KeyNum >= uint64(w.RecordCount) {
							if _, ok := acked.Load(op.KeyNum); !ok {
								t.Errorf("%s of key %d whose insert is not acknowledged", op.Kind, op.KeyNum)
							}
						}
					}
				}
				for _, h := range held {
					acked.Store(h.KeyNum, true)
					g.Acknowledge(h)
				}
				mu.Lock()
				inserts += mine
				mu.Unlock()
			}()
		}
		wg.Wait()
		if want := int64(w.RecordCount + inserts - 1); s.Inserts().Last() != want {
			t.Errorf("%s: Last = %d after %d inserts, want %d", name, s.Inserts().Last(), inserts, want)
		}
		if inserts < clients*ops/5 {
			t.Errorf("%s: only %d inserts", name, inserts)
		}
	}
}

// The latest distribution follows new inserts: once many are acknowledged, reads go mostly to
// the newest keys.
func TestLatestFollowsInserts(t *testing.T) {
	w, _ := Core("d")
	s := NewShared(w)
	g := s.NewGenerator(9)
	for range 20000 {
		if op := g.Next(); op.Kind == Insert {
			g.Acknowledge(op)
		}
	}
	last := uint64(s.Inserts().Last())
	if last < 1500 {
		t.Fatalf("only %d acknowledged", last)
	}
	recent := 0
	reads := 0
	for range 20000 {
		op := g.Next()
		if op.Kind == Insert {
			g.Acknowledge(op)
			continue
		}
		reads++
		if op.KeyNum+100 >= last {
			recent++
		}
	}
	if frac := float64(recent) / float64(reads); frac < 0.4 {
		t.Errorf("only %.3f of reads within 100 of the newest key", frac)
	}
}

func TestGeneratorDeterministicAndLoad(t *testing.T) {
	w, _ := Core("a")
	s := NewShared(w)
	g1, g2 := s.NewGenerator(7), s.NewGenerator(7)
	for range 1000 {
		a, b := g1.Next(), g2.Next()
		if a.Kind != b.Kind || a.KeyNum != b.KeyNum || !bytes.Equal(a.Key, b.Key) || !bytes.Equal(a.Value, b.Value) {
			t.Fatalf("same seed, different ops: %+v vs %+v", a, b)
		}
	}
	for i := range 10 {
		op := g1.Load(i)
		if op.Kind != Insert || op.KeyNum != uint64(i) || !bytes.Equal(op.Key, w.LoadKey(i)) || len(op.Value) != 1000 {
			t.Fatalf("Load(%d) = %+v", i, op)
		}
		g1.Acknowledge(op) // ignored for load inserts
	}
	if s.Inserts().Last() != 999 {
		t.Fatalf("load acknowledgements moved the insert counter to %d", s.Inserts().Last())
	}
}

// Values are YCSB RandomByteIterator text: printable, ' '..'~'.
func TestValueBytes(t *testing.T) {
	w, _ := ParseMix("update=1,fieldcount=3,fieldlength=7")
	g := NewShared(w).NewGenerator(1)
	var hist [256]int
	for range 2000 {
		op := g.Next()
		if len(op.Value) != 21 {
			t.Fatalf("value of %d bytes, want 21", len(op.Value))
		}
		for _, c := range op.Value {
			hist[c]++
		}
	}
	for c, n := range hist {
		if n > 0 && (c < ' ' || c > ' '+95) {
			t.Fatalf("value byte %#x outside YCSB's printable range", c)
		}
	}
	if hist['A'] == 0 || hist[' '] == 0 {
		t.Errorf("value bytes not spread: %v", hist[' ':'~'])
	}
}

// Next allocates nothing in steady state (keys and values live in the generator's buffers).
func TestNextDoesNotAllocate(t *testing.T) {
	for _, name := range CoreNames {
		w, _ := Core(name)
		g := NewShared(w).NewGenerator(1)
		allocs := testing.AllocsPerRun(5000, func() {
			if op := g.Next(); op.Kind == Insert {
				g.Acknowledge(op)
			}
		})
		if allocs != 0 {
			t.Errorf("workload %s: %.2f allocations per Next", name, allocs)
		}
	}
}

func BenchmarkGeneratorNext(b *testing.B) {
	for _, name := range CoreNames {
		b.Run(name, func(b *testing.B) {
			w, _ := Core(name)
			w.RecordCount = 1_000_000
			w.OperationCount = 10_000_000
			g := NewShared(w).NewGenerator(1)
			b.ReportAllocs()
			for b.Loop() {
				if op := g.Next(); op.Kind == Insert {
					g.Acknowledge(op)
				}
			}
		})
	}
}
