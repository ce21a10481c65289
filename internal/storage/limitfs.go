package storage

import (
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// LimitedFS is an in-memory filesystem with a capacity: a write that would take the files'
// total size past it fails with ENOSPC, as a full disk does, and GetDiskUsage reports the
// capacity and what is left. It lets tests (and the simulator) fill a node's disk without
// root or a tmpfs: the disk-full scenario of issue 12 runs through Pebble exactly as on a
// real full filesystem. Capacity can be changed at any time (SetCapacity), like freeing
// space. Hard links are counted once per name (Pebble links only when ingesting).
type LimitedFS struct {
	*vfs.MemFS
	mu       sync.Mutex
	capacity uint64
	// writeErrors counts writes refused for lack of space.
	writeErrors uint64
}

// NewLimitedFS returns an empty in-memory filesystem of capacity bytes.
func NewLimitedFS(capacity uint64) *LimitedFS {
	return &LimitedFS{MemFS: vfs.NewMem(), capacity: capacity}
}

// SetCapacity changes the capacity (to free space, or to fill the disk at once).
func (fs *LimitedFS) SetCapacity(capacity uint64) {
	fs.mu.Lock()
	fs.capacity = capacity
	fs.mu.Unlock()
}

// NoSpaceErrors returns how many writes failed for lack of space.
func (fs *LimitedFS) NoSpaceErrors() uint64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.writeErrors
}

// Used returns the total size of every file.
func (fs *LimitedFS) Used() uint64 {
	var total uint64
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		if depth > 64 { // bounded: a MemFS tree is never deeper than a store's directories
			return
		}
		names, err := fs.MemFS.List(dir)
		if err != nil {
			return
		}
		for _, n := range names {
			p := fs.MemFS.PathJoin(dir, n)
			st, err := fs.MemFS.Stat(p)
			if err != nil {
				continue
			}
			if st.IsDir() {
				walk(p, depth+1)
				continue
			}
			total += uint64(st.Size())
		}
	}
	walk("/", 0)
	return total
}

// reserve reports whether n more bytes fit; it counts a refusal.
func (fs *LimitedFS) reserve(n int) error {
	used := fs.Used()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if used+uint64(n) > fs.capacity {
		fs.writeErrors++
		return &os.PathError{Op: "write", Path: "limitedfs", Err: syscall.ENOSPC}
	}
	return nil
}

// GetDiskUsage implements vfs.FS.
func (fs *LimitedFS) GetDiskUsage(string) (vfs.DiskUsage, error) {
	used := fs.Used()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	avail := uint64(0)
	if used < fs.capacity {
		avail = fs.capacity - used
	}
	return vfs.DiskUsage{AvailBytes: avail, TotalBytes: fs.capacity, UsedBytes: used}, nil
}

// Create implements vfs.FS.
func (fs *LimitedFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.MemFS.Create(name, category)
	if err != nil {
		return nil, err
	}
	return &limitedFile{File: f, fs: fs}, nil
}

// OpenReadWrite implements vfs.FS.
func (fs *LimitedFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.MemFS.OpenReadWrite(name, category, opts...)
	if err != nil {
		return nil, err
	}
	return &limitedFile{File: f, fs: fs}, nil
}

// ReuseForWrite implements vfs.FS.
func (fs *LimitedFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.MemFS.ReuseForWrite(oldname, newname, category)
	if err != nil {
		return nil, err
	}
	return &limitedFile{File: f, fs: fs}, nil
}

// Unwrap implements vfs.FS.
func (fs *LimitedFS) Unwrap() vfs.FS { return fs.MemFS }

// limitedFile tracks its position as MemFS files do (one position for Read and Write, from
// 0 when opened), so that rewriting a recycled file (Pebble reuses old WAL files) needs no
// new space, as on a real filesystem.
type limitedFile struct {
	vfs.File
	fs  *LimitedFS
	pos int64
}

func (f *limitedFile) growth(offset int64, n int) int {
	st, err := f.File.Stat()
	if err != nil {
		return n
	}
	return max(0, int(offset+int64(n)-st.Size()))
}

func (f *limitedFile) Write(p []byte) (int, error) {
	if err := f.fs.reserve(f.growth(f.pos, len(p))); err != nil {
		return 0, err
	}
	n, err := f.File.Write(p)
	f.pos += int64(n)
	return n, err
}

func (f *limitedFile) Read(p []byte) (int, error) {
	n, err := f.File.Read(p)
	f.pos += int64(n)
	return n, err
}

func (f *limitedFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.reserve(f.growth(off, len(p))); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

var _ vfs.FS = (*LimitedFS)(nil)
var _ io.Writer = (*limitedFile)(nil)

// String describes the filesystem's fill.
func (fs *LimitedFS) String() string {
	u, _ := fs.GetDiskUsage("")
	return fmt.Sprintf("limitedfs: %d of %d bytes used", u.UsedBytes, u.TotalBytes)
}
