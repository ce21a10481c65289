package check

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkSequentiallyConsistent10k checks a 10,000-op, 10-key, 20-process history, the size
// the simulator produces per seed.
func BenchmarkSequentiallyConsistent10k(b *testing.B) {
	h := genSequential(rand.New(rand.NewPCG(1, 1)), 20, 10, 10_000).h
	if v := SequentiallyConsistent(h); v != nil {
		b.Fatal(v)
	}
	b.ReportAllocs()
	for b.Loop() {
		SequentiallyConsistent(h)
	}
}

func BenchmarkValidate10k(b *testing.B) {
	h := genSequential(rand.New(rand.NewPCG(1, 1)), 20, 10, 10_000).h
	b.ReportAllocs()
	for b.Loop() {
		if err := h.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLinearizable10k(b *testing.B) {
	h := genSequential(rand.New(rand.NewPCG(1, 1)), 20, 10, 10_000).h
	b.ReportAllocs()
	for b.Loop() {
		if res, v := Linearizable(h, linTimeout); res != Ok {
			b.Fatal(res, v)
		}
	}
}
