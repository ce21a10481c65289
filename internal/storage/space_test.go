package storage

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"meridian/internal/hlc"
)

// valueRecord returns record i with size bytes of incompressible value.
func valueRecord(i int, size int) Record {
	v := make([]byte, size)
	r := rand.NewChaCha8([32]byte{byte(i), byte(i >> 8), byte(i >> 16)})
	r.Read(v)
	return Record{Keyspace: "ks", Key: []byte(fmt.Sprintf("key%06d", i)),
		Version: hlc.Version{WallNanos: int64(i + 1), NodeID: 1}, Value: v}
}

// The disk-full scenario of issue 12 at the storage level: the store turns Full before its
// filesystem is exhausted (no write ever meets ENOSPC), keeps serving reads, and reports not
// Full again once space is added, without reopening; nothing applied is lost.
func TestDiskFullFloorRefusesBeforeENOSPCAndRecovers(t *testing.T) {
	const mib = 1 << 20
	fs := NewLimitedFS(64 * mib)
	e, err := Open("data", Options{FS: fs, DiskReserveBytes: 16 * mib})
	if err != nil {
		t.Fatal(err)
	}
	s := e.RefreshDiskState()
	if !s.Monitored || s.Full || s.BallastBytes != 8*mib || s.FloorBytes() != 8*mib {
		t.Fatalf("fresh store: %+v", s)
	}
	// Fill until the store says Full; every write before that must succeed.
	applied := 0
	for ; applied < 10_000; applied++ {
		if s = e.RefreshDiskState(); s.Full {
			break
		}
		if err := e.Apply([]Record{valueRecord(applied, 64<<10)}, true); err != nil {
			t.Fatalf("write %d failed before the store reported Full: %v (%s)", applied, err, fs)
		}
	}
	if !s.Full || s.AvailBytes >= s.FloorBytes() || s.NoSpaceErrors != 0 || fs.NoSpaceErrors() != 0 {
		t.Fatalf("after %d writes: %+v (fs refusals %d); want Full below the floor with no ENOSPC", applied, s, fs.NoSpaceErrors())
	}
	if !strings.Contains(s.String(), "free ") {
		t.Fatalf("state text %q", s)
	}
	if rec, found, err := e.Get("ks", valueRecord(0, 0).Key); err != nil || !found || len(rec.Value) != 64<<10 {
		t.Fatalf("read while full: found=%v err=%v", found, err)
	}
	// Space is added: Full clears without reopening, and writes work.
	fs.SetCapacity(128 * mib)
	if s = e.RefreshDiskState(); s.Full {
		t.Fatalf("after adding space: %+v", s)
	}
	if err := e.Apply([]Record{valueRecord(applied, 64<<10)}, true); err != nil {
		t.Fatal(err)
	}
	applied++
	checkRecords(t, e, applied)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e, err = Open("data", Options{FS: fs, DiskReserveBytes: 16 * mib})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	checkRecords(t, e, applied)
}

// When another process takes the last free byte, the store's next write that needs space
// meets ENOSPC: instead of Pebble's fatal WAL error or a flush retried forever, the ballast
// is given back and the write retried; the store stays Full until the space and its ballast
// are back.
func TestBallastAbsorbsENOSPC(t *testing.T) {
	const mib = 1 << 20
	fs := NewLimitedFS(64 * mib)
	e, err := Open("data", Options{FS: fs, DiskReserveBytes: 16 * mib})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	applied := 0
	for ; applied < 8; applied++ {
		if err := e.Apply([]Record{valueRecord(applied, 64<<10)}, true); err != nil {
			t.Fatal(err)
		}
	}
	filler, err := fs.Create("filler", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	for _, chunk := range []int{1 << 20, 64 << 10, 1 << 10, 16} {
		for range 1 << 16 {
			if _, err := filler.Write(make([]byte, chunk)); err != nil {
				break
			}
		}
	}
	filler.Close()
	refusedBefore := fs.NoSpaceErrors()
	// A write, then a flush of the memtable to a new sstable, which needs new space.
	if err := e.Apply([]Record{valueRecord(applied, 1<<10)}, true); err != nil {
		t.Fatalf("a write on a full disk with the ballast in place failed: %v", err)
	}
	applied++
	if err := e.db.Flush(); err != nil {
		t.Fatalf("a flush on a full disk with the ballast in place failed: %v", err)
	}
	if err := e.Apply([]Record{valueRecord(applied, 1<<10)}, true); err != nil {
		t.Fatalf("a write after the ballast was given back failed: %v", err)
	}
	applied++
	s := e.DiskState()
	if !s.Full || s.BallastBytes != 0 || s.NoSpaceErrors == 0 || fs.NoSpaceErrors() == refusedBefore {
		t.Fatalf("after ENOSPC: %+v (fs refusals %d, %d before)", s, fs.NoSpaceErrors(), refusedBefore)
	}
	// Still full while the ballast cannot be put back.
	if s = e.RefreshDiskState(); !s.Full {
		t.Fatalf("Full cleared with the disk still full: %+v", s)
	}
	if err := fs.Remove("filler"); err != nil {
		t.Fatal(err)
	}
	if s = e.RefreshDiskState(); s.Full || s.BallastBytes != 8*mib {
		t.Fatalf("after freeing space: %+v", s)
	}
	checkRecords(t, e, applied)
}

func checkRecords(t *testing.T, e *Engine, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, found, err := e.Get("ks", valueRecord(i, 0).Key); err != nil || !found {
			t.Fatalf("record %d of %d lost: found=%v err=%v", i, n, found, err)
		}
	}
}

func TestDiskReserveValidation(t *testing.T) {
	if _, err := Open("data", Options{FS: NewLimitedFS(8 << 20), DiskReserveBytes: 8 << 20}); err == nil || !strings.Contains(err.Error(), "not smaller than the filesystem") {
		t.Fatalf("a reserve as large as the disk: %v", err)
	}
	if got := DefaultReserve(100 << 30); got != MaxDefaultReserveBytes {
		t.Errorf("DefaultReserve(100 GiB) = %d", got)
	}
	if got := DefaultReserve(1 << 30); got != 1<<30/20 {
		t.Errorf("DefaultReserve(1 GiB) = %d", got)
	}
	if got := DefaultReserve(32 << 20); got != 8<<20 {
		t.Errorf("DefaultReserve(32 MiB) = %d, want a quarter", got)
	}
	// An in-memory store without usage figures is not monitored and never full.
	e, err := Open("data", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if s := e.RefreshDiskState(); s.Monitored || s.Full {
		t.Errorf("MemFS store: %+v", s)
	}
}

type captureLogger struct {
	mu    sync.Mutex
	lines []string
}

func (c *captureLogger) Infof(format string, args ...interface{}) {}
func (c *captureLogger) Errorf(format string, args ...interface{}) {
	c.mu.Lock()
	c.lines = append(c.lines, fmt.Sprintf(format, args...))
	c.mu.Unlock()
}
func (c *captureLogger) Fatalf(format string, args ...interface{}) { c.Errorf(format, args...) }

// A Pebble error repeated continuously (a flush retried on a full disk) is logged once per
// interval, not once per retry (issue 12: 90,692 lines in 3.5 minutes).
func TestPebbleErrorsAreRateLimited(t *testing.T) {
	out := &captureLogger{}
	l := newQuietLogger()
	l.out = out
	for i := range 10_000 {
		l.Errorf("background error: %s", fmt.Sprintf("flush %d: no space left on device", i))
	}
	l.Errorf("another error: %d", 1)
	if len(out.lines) != 2 {
		t.Fatalf("%d lines logged for 10,001 errors of 2 formats: %q", len(out.lines), out.lines)
	}
}
