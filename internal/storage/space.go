package storage

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dustin/go-humanize"
)

// Disk space (issue 12, defect 2). Pebble treats a failed WAL write as fatal: on ENOSPC it
// calls Logger.Fatalf ("pebble: fatal commit error"), and a failed WAL rotation panics
// (db.go rotateWAL: "What to do here? Stumbling on doesn't seem worthwhile"); a flush that
// fails for lack of space is retried forever, and the write stall it causes blocks every
// commit. So the store must never let its WAL meet a full disk. Three layers keep it so:
//
//  1. A floor. Below ReserveBytes/2 of free space the engine reports DiskState.Full, and the
//     node refuses client writes and replicated writes at once with a clear error. What
//     still writes (read repair, lease records, metadata) is small and goes into the floor,
//     as do Pebble's own flushes and compactions; reads are never affected.
//  2. A ballast file of ReserveBytes/2 in the store's directory (CockroachDB keeps an
//     EMERGENCY_BALLAST the same way). When a write meets ENOSPC anyway — another process
//     filled the disk faster than the floor could be noticed — Pebble's vfs.OnDiskFull hook
//     deletes the ballast before the write is retried, so the retry succeeds and the WAL is
//     never poisoned; the engine turns Full at once.
//  3. Recovery without a restart. The monitor reads the filesystem's usage every
//     DiskCheckInterval; once free space is back above the floor plus an eighth of the
//     reserve (hysteresis, so the state does not flap) and the ballast could be put back,
//     Full clears and writes are accepted again.
//
// If the disk fills again while the ballast is gone, Pebble's own fatal path remains: the
// process exits with a clear message rather than acknowledging anything it cannot keep.

// DiskState is the store's view of its filesystem.
type DiskState struct {
	// Monitored is false when the filesystem reports no usage (an in-memory store): then
	// Full is never set.
	Monitored bool
	// Full: free space is below the floor (ReserveBytes/2), or a write met ENOSPC and space
	// has not come back yet. Client and replicated writes must be refused.
	Full                   bool
	AvailBytes, TotalBytes uint64
	ReserveBytes           uint64
	// BallastBytes is the size of the ballast file now (0 once it was spent on an ENOSPC).
	BallastBytes uint64
	// NoSpaceErrors counts writes that met ENOSPC since the engine opened.
	NoSpaceErrors int64
}

// FloorBytes is the free space below which writes are refused.
func (s DiskState) FloorBytes() uint64 { return s.ReserveBytes / 2 }

// ResumeBytes is the free space at which a full store accepts writes again.
func (s DiskState) ResumeBytes() uint64 { return s.ReserveBytes/2 + s.ReserveBytes/8 }

// String says how full the disk is, for error messages.
func (s DiskState) String() string {
	return fmt.Sprintf("free %s of %s; writes are refused below %s free and resume above %s",
		humanize.IBytes(s.AvailBytes), humanize.IBytes(s.TotalBytes), humanize.IBytes(s.FloorBytes()), humanize.IBytes(s.ResumeBytes()))
}

// Defaults of the disk reserve.
const (
	// DefaultReserveFraction of the filesystem is kept free by default, clamped to
	// [MinDefaultReserveBytes, MaxDefaultReserveBytes] and to a quarter of the filesystem.
	DefaultReserveFraction = 0.05
	MinDefaultReserveBytes = 16 << 20
	MaxDefaultReserveBytes = 1 << 30
	// DefaultDiskCheckInterval is how often the monitor reads the filesystem's usage.
	DefaultDiskCheckInterval = 250 * time.Millisecond
	ballastName              = "EMERGENCY_BALLAST"
	ballastChunkBytes        = 1 << 20
)

// DefaultReserve returns the reserve for a filesystem of totalBytes.
func DefaultReserve(totalBytes uint64) uint64 {
	r := uint64(float64(totalBytes) * DefaultReserveFraction)
	r = min(max(r, MinDefaultReserveBytes), MaxDefaultReserveBytes)
	return min(r, totalBytes/4)
}

// spaceGuard implements the three layers above for one store.
type spaceGuard struct {
	fs          vfs.FS // the unwrapped filesystem: ballast removal must not recurse into the hook
	dir         string
	ballastPath string
	reserve     uint64 // 0 until known (unmonitored filesystems keep 0)
	monitored   bool

	mu       sync.Mutex // serialises refresh and ballast changes
	full     bool
	noSpace  atomic.Int64
	hitSpace atomic.Bool // an ENOSPC since the last time space came back
	state    atomic.Pointer[DiskState]
}

// newSpaceGuard returns the guard of the store in dir; start makes it work once the
// directory exists.
func newSpaceGuard(fs vfs.FS, dir string) *spaceGuard {
	g := &spaceGuard{fs: fs, dir: dir, ballastPath: fs.PathJoin(dir, ballastName)}
	g.state.Store(&DiskState{})
	return g
}

// start reads the filesystem's size, settles the reserve (0: DefaultReserve) and lays down
// the ballast if there is room.
func (g *spaceGuard) start(reserve uint64) error {
	u, err := g.fs.GetDiskUsage(g.dir)
	switch {
	case errors.Is(err, vfs.ErrUnsupported):
		return nil
	case err != nil:
		return fmt.Errorf("storage: disk usage of %s: %w", g.dir, err)
	}
	g.monitored = true
	g.reserve = reserve
	if g.reserve == 0 {
		g.reserve = DefaultReserve(u.TotalBytes)
	}
	if g.reserve >= u.TotalBytes {
		return fmt.Errorf("storage: disk reserve %s is not smaller than the filesystem of %s (%s)",
			humanize.IBytes(g.reserve), g.dir, humanize.IBytes(u.TotalBytes))
	}
	g.refresh()
	return nil
}

// onNoSpace is Pebble's vfs.OnDiskFull callback: it runs while every new write to the
// filesystem waits, so it only deletes the ballast and marks the store full.
func (g *spaceGuard) onNoSpace() {
	// refresh holds mu only around usage reads and ballast writes on the unwrapped
	// filesystem, which never wait for this hook: no deadlock, and no stale state stored
	// over this one.
	g.mu.Lock()
	defer g.mu.Unlock()
	g.noSpace.Add(1)
	g.hitSpace.Store(true)
	_ = g.fs.Remove(g.ballastPath) // absent already: nothing more to give back
	g.full = true
	s := g.load()
	s.Full = true
	s.BallastBytes = 0
	s.NoSpaceErrors = g.noSpace.Load()
	g.state.Store(&s)
}

func (g *spaceGuard) load() DiskState { return *g.state.Load() }

func (g *spaceGuard) ballastSize() uint64 {
	st, err := g.fs.Stat(g.ballastPath)
	if err != nil {
		return 0
	}
	return uint64(st.Size())
}

// refresh reads the filesystem's usage, restores the ballast when there is room, and
// updates Full with hysteresis. It returns the new state.
func (g *spaceGuard) refresh() DiskState {
	if !g.monitored {
		return g.load()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	u, err := g.fs.GetDiskUsage(g.dir)
	if err != nil {
		return g.load() // keep the last reading; the next tick tries again
	}
	floor, resume, want := g.reserve/2, g.reserve/2+g.reserve/8, g.reserve/2
	ballast := g.ballastSize()
	if ballast < want && u.AvailBytes >= resume+(want-ballast) {
		if err := g.writeBallast(ballast, want); err == nil {
			ballast = want
		} else {
			ballast = g.ballastSize()
		}
		if u2, err := g.fs.GetDiskUsage(g.dir); err == nil {
			u = u2
		}
	}
	if g.hitSpace.Load() {
		g.full = true // a write met ENOSPC: refuse until space and the ballast are back
	}
	switch {
	case u.AvailBytes < floor:
		g.full = true
	case g.full && u.AvailBytes >= resume && (ballast >= want || !g.hitSpace.Load()):
		g.full = false
		g.hitSpace.Store(false)
	}
	s := DiskState{Monitored: true, Full: g.full, AvailBytes: u.AvailBytes, TotalBytes: u.TotalBytes,
		ReserveBytes: g.reserve, BallastBytes: ballast, NoSpaceErrors: g.noSpace.Load()}
	g.state.Store(&s)
	return s
}

// writeBallast grows the ballast file from have to want bytes: fallocate(2) where the
// filesystem has it (blocks are reserved at once, nothing is written), otherwise real zeros
// (a sparse file would hold no blocks). Then it syncs.
func (g *spaceGuard) writeBallast(have, want uint64) error {
	if err := g.fs.MkdirAll(g.dir, 0o755); err != nil {
		return err
	}
	if have > 0 {
		if err := g.fs.Remove(g.ballastPath); err != nil {
			return err
		}
	}
	f, err := g.fs.Create(g.ballastPath, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if fd := f.Fd(); fd != vfs.InvalidFd && fallocate(fd, want) == nil {
		if err := f.Sync(); err != nil {
			f.Close()
			g.fs.Remove(g.ballastPath)
			return err
		}
		return f.Close()
	}
	zeros := make([]byte, ballastChunkBytes)
	for written := uint64(0); written < want; {
		n := min(uint64(len(zeros)), want-written)
		if _, err := f.Write(zeros[:n]); err != nil {
			f.Close()
			g.fs.Remove(g.ballastPath)
			return err
		}
		written += n
	}
	if err := f.Sync(); err != nil {
		f.Close()
		g.fs.Remove(g.ballastPath)
		return err
	}
	return f.Close()
}

// monitor refreshes the state every interval until stop is closed.
func (g *spaceGuard) monitor(interval time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			g.refresh()
		}
	}
}
