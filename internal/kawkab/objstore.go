package kawkab

// The object-store tier: Kawkab's global store (thesis 5.3.2, "Global Store Service"), where
// full chunks are uploaded and from which historical reads fetch them with ranged GETs. This
// file holds the interface the rest of Kawkab programs against, the rules every implementation
// follows (keys, ranges, errors), and two implementations without dependencies: MemObjectStore
// for tests and DirObjectStore over a local directory. objmodel.go wraps any of them in the
// latency and bandwidth model of S3; package s3store speaks the S3 API.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"
)

// ObjectStore is a flat namespace of immutable-once-written byte objects under string keys:
// the subset of S3 that Kawkab needs (docs/plans/kawkab.md, "Object store tier"). Every
// implementation is safe for concurrent use and follows the same rules, which the conformance
// suite in package objstoretest checks:
//
//   - Keys: non-empty, at most MaxKeyBytes bytes of valid UTF-8, no NUL byte (ValidateKey). A
//     bad key is refused with an error wrapping ErrInvalidKey before anything is sent or
//     stored. '/' has no special meaning: "a" and "a/b" are two independent objects.
//   - Put stores a copy of data under key, replacing any previous object whole; a concurrent
//     Get sees the old object or the new one, never a mix. An empty object is allowed.
//   - Get(key, off, n) returns a new slice the caller owns. n < 0 means "from off to the end".
//     The range must lie inside the object: 0 ≤ off ≤ size and, for n ≥ 0, off+n ≤ size;
//     otherwise the error wraps ErrInvalidRange. A range reaching past the end is an error,
//     not clamped: Kawkab always knows how long its chunks are, so a short answer would only
//     hide a bug. Empty ranges at the end are valid: Get(key, size, 0) and Get(key, size, -1)
//     return no bytes. A missing object: ErrNotFound (checked before the range).
//   - Delete is idempotent: deleting a missing object is not an error (as in S3).
//   - List(prefix) returns every object whose key starts with prefix (all of them for ""),
//     sorted by key in byte order, with their sizes. The prefix follows the key rules except
//     that it may be empty.
//   - A context that is already done makes any call return its error.
type ObjectStore interface {
	Put(ctx context.Context, key string, data []byte) error
	// Get returns n bytes at off (n < 0: to the end): ranged GETs for historical reads.
	Get(ctx context.Context, key string, off, n int64) ([]byte, error)
	Delete(ctx context.Context, key string) error
	List(ctx context.Context, prefix string) ([]ObjectInfo, error)
}

// ObjectInfo describes one stored object in a List answer.
type ObjectInfo struct {
	Key  string
	Size int64
}

// MaxKeyBytes is the longest key, in bytes of UTF-8: S3's own limit.
const MaxKeyBytes = 1024

var (
	// ErrNotFound: no object under the key.
	ErrNotFound = errors.New("kawkab: object not found")
	// ErrInvalidRange: a Get's range does not lie inside the object.
	ErrInvalidRange = errors.New("kawkab: range outside the object")
	// ErrInvalidKey: a key (or List prefix) that no implementation accepts.
	ErrInvalidKey = errors.New("kawkab: invalid object key")
)

// ValidateKey says why key cannot name an object, or nil. The rules are S3's (a key is a
// sequence of Unicode characters whose UTF-8 encoding is at most 1,024 bytes) plus no NUL, which
// neither a file name nor most S3-compatible servers can carry.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	return validateKeyText("key", key)
}

// ValidatePrefix is ValidateKey for List prefixes, which may be empty.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return validateKeyText("prefix", prefix)
}

func validateKeyText(what, s string) error {
	if len(s) > MaxKeyBytes {
		return fmt.Errorf("%w: %s of %d bytes, longer than %d", ErrInvalidKey, what, len(s), MaxKeyBytes)
	}
	if i := strings.IndexByte(s, 0); i >= 0 {
		return fmt.Errorf("%w: %s %q has a NUL byte at %d", ErrInvalidKey, what, s, i)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalidKey, what, s)
	}
	return nil
}

// CheckRange applies the range rules of ObjectStore.Get to an object of size bytes and returns
// the half-open byte range [start, end) to read. Implementations share it so they agree.
func CheckRange(key string, size, off, n int64) (start, end int64, err error) {
	if off < 0 || off > size || (n >= 0 && n > size-off) {
		if n < 0 {
			return 0, 0, fmt.Errorf("%w: %q from %d to the end, object of %d bytes", ErrInvalidRange, key, off, size)
		}
		return 0, 0, fmt.Errorf("%w: %q bytes [%d, %d+%d), object of %d bytes", ErrInvalidRange, key, off, off, n, size)
	}
	if n < 0 {
		return off, size, nil
	}
	return off, off + n, nil
}

func notFound(key string) error {
	return fmt.Errorf("%w: %q", ErrNotFound, key)
}

// MemObjectStore keeps objects in memory: for tests. The zero value is not usable; use
// NewMemObjectStore.
type MemObjectStore struct {
	mu      sync.RWMutex
	objects map[string][]byte
}

// NewMemObjectStore returns an empty in-memory store.
func NewMemObjectStore() *MemObjectStore {
	return &MemObjectStore{objects: make(map[string][]byte)}
}

var _ ObjectStore = (*MemObjectStore)(nil)

// Put implements ObjectStore.
func (s *MemObjectStore) Put(ctx context.Context, key string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateKey(key); err != nil {
		return err
	}
	c := append([]byte(nil), data...)
	s.mu.Lock()
	s.objects[key] = c
	s.mu.Unlock()
	return nil
}

// Get implements ObjectStore.
func (s *MemObjectStore) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	s.mu.RLock()
	obj, ok := s.objects[key]
	s.mu.RUnlock()
	if !ok {
		return nil, notFound(key)
	}
	// Stored slices are never modified after Put, so they can be read without the lock.
	start, end, err := CheckRange(key, int64(len(obj)), off, n)
	if err != nil {
		return nil, err
	}
	return append(make([]byte, 0, end-start), obj[start:end]...), nil
}

// Delete implements ObjectStore.
func (s *MemObjectStore) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateKey(key); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.objects, key)
	s.mu.Unlock()
	return nil
}

// List implements ObjectStore.
func (s *MemObjectStore) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	var out []ObjectInfo
	s.mu.RLock()
	for k, v := range s.objects {
		if strings.HasPrefix(k, prefix) {
			out = append(out, ObjectInfo{Key: k, Size: int64(len(v))})
		}
	}
	s.mu.RUnlock()
	sortInfos(out)
	return out, nil
}

func sortInfos(infos []ObjectInfo) {
	sort.Slice(infos, func(i, j int) bool { return infos[i].Key < infos[j].Key })
}

// DirObjectStore keeps each object in a file under a local directory.
//
// Keys are mapped to paths so that every valid key has its own path and no key can reach
// outside the directory: the key is split at '/' into segments (possibly empty); each segment
// is escaped, keeping only [a-z0-9_-] and writing every other byte as %XX (upper-case hex) —
// so no escaped name is "." or "..", contains a separator, or differs from another only by
// case; a segment that is not the last becomes a directory named "<escaped>.d", the last one
// a file "<escaped>.o". An escaped segment longer than 240 bytes is cut into pieces (never
// inside a %XX), each but the last a directory "<piece>.p" holding the rest, so no file name
// exceeds 255 bytes. "kawkab/s1/d0" is stored in kawkab.d/s1.d/d0.o; "a" (a.o) and "a/b"
// (a.d/b.o) live side by side as S3 allows. Every path is opened through an os.Root on the
// directory as well, which refuses anything that would leave it.
//
// A Put writes a temporary file (".tmp-<random>") in the object's directory, fsyncs it, renames
// it over the object and fsyncs the directory (and the parents of any directory it created):
// after Put returns the object survives a crash, and readers see the old object or the new one.
// Delete removes the file and the directories left empty. List walks the directory, skipping
// the subtrees that cannot hold the prefix and every name that is not an encoded object (such
// as temporary files left by a crash).
type DirObjectStore struct {
	root *os.Root
	// dirs serializes creating an object's directory (and the temporary file that keeps it
	// non-empty) with removing empty directories after a Delete.
	dirs sync.Mutex
}

var _ ObjectStore = (*DirObjectStore)(nil)

// OpenDirObjectStore opens (creating it if needed) a store in dir.
func OpenDirObjectStore(dir string) (*DirObjectStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kawkab: object store directory: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("kawkab: object store directory: %w", err)
	}
	return &DirObjectStore{root: root}, nil
}

// Close releases the directory.
func (s *DirObjectStore) Close() error { return s.root.Close() }

const (
	dirSegSuffix   = ".d" // a directory holding the keys that continue after "<segment>/"
	dirPieceSuffix = ".p" // a directory holding the rest of a long segment
	dirObjSuffix   = ".o" // an object's file
	dirTempPrefix  = ".tmp-"
	dirMaxPiece    = 240
)

// dirKeyPath returns the object's file path relative to the root, and its directory ("." for
// the root itself).
func dirKeyPath(key string) (file, dir string) {
	segs := strings.Split(key, "/")
	var parts []string
	for i, seg := range segs {
		pieces := splitEscaped(escapeSegment(seg))
		for _, p := range pieces[:len(pieces)-1] {
			parts = append(parts, p+dirPieceSuffix)
		}
		last := pieces[len(pieces)-1]
		if i < len(segs)-1 {
			parts = append(parts, last+dirSegSuffix)
		} else {
			parts = append(parts, last+dirObjSuffix)
		}
	}
	file = path.Join(parts...)
	dir = path.Dir(file)
	return file, dir
}

func dirSafe(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

func escapeSegment(seg string) string {
	var b strings.Builder
	const hexdigits = "0123456789ABCDEF"
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if dirSafe(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(hexdigits[c>>4])
			b.WriteByte(hexdigits[c&15])
		}
	}
	return b.String()
}

// splitEscaped cuts an escaped segment into pieces of at most dirMaxPiece bytes, never inside
// a %XX; it returns one (possibly empty) piece for a short segment.
func splitEscaped(esc string) []string {
	var out []string
	for len(esc) > dirMaxPiece {
		cut := dirMaxPiece
		// A '%' in the last two bytes before the cut would split an escape.
		if esc[cut-1] == '%' {
			cut--
		} else if esc[cut-2] == '%' {
			cut -= 2
		}
		out = append(out, esc[:cut])
		esc = esc[cut:]
	}
	return append(out, esc)
}

// unescapeName decodes an escaped name (without its suffix); ok is false for a name that no
// key produces (a foreign file).
func unescapeName(name string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case dirSafe(c):
			b.WriteByte(c)
		case c == '%' && i+2 < len(name) && isUpperHex(name[i+1]) && isUpperHex(name[i+2]):
			v, _ := hex.DecodeString(name[i+1 : i+3])
			if dirSafe(v[0]) {
				return "", false // never escaped: not our encoding
			}
			b.WriteByte(v[0])
			i += 2
		default:
			return "", false
		}
	}
	return b.String(), true
}

func isUpperHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'A' && c <= 'F' }

// Put implements ObjectStore.
func (s *DirObjectStore) Put(ctx context.Context, key string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateKey(key); err != nil {
		return err
	}
	file, dir := dirKeyPath(key)
	tmp, tmpName, err := s.createTemp(dir)
	if err != nil {
		return fmt.Errorf("kawkab: put %q: %w", key, err)
	}
	cleanup := func() { _ = s.root.Remove(tmpName) }
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		cleanup()
		return fmt.Errorf("kawkab: put %q: %w", key, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		cleanup()
		return fmt.Errorf("kawkab: put %q: fsync: %w", key, err)
	}
	if err := tmp.Close(); err != nil {
		cleanup()
		return fmt.Errorf("kawkab: put %q: %w", key, err)
	}
	if err := s.root.Rename(tmpName, file); err != nil {
		cleanup()
		return fmt.Errorf("kawkab: put %q: %w", key, err)
	}
	if err := s.syncDir(dir); err != nil {
		return fmt.Errorf("kawkab: put %q: fsync directory: %w", key, err)
	}
	return nil
}

// createTemp makes dir (fsyncing the parents of what it creates) and a new temporary file in
// it; the file keeps dir from being removed by a concurrent Delete's cleanup.
func (s *DirObjectStore) createTemp(dir string) (*os.File, string, error) {
	var suffix [8]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return nil, "", err
	}
	name := path.Join(dir, dirTempPrefix+hex.EncodeToString(suffix[:]))
	s.dirs.Lock()
	defer s.dirs.Unlock()
	if dir != "." {
		// The topmost directory missing, if any.
		top := ""
		for d := dir; d != "."; d = path.Dir(d) {
			_, err := s.root.Stat(d)
			if err == nil {
				break
			}
			if !errors.Is(err, fs.ErrNotExist) {
				return nil, "", err
			}
			top = d
		}
		if top != "" {
			if err := s.root.MkdirAll(dir, 0o755); err != nil {
				return nil, "", err
			}
			// The new directories' entries must reach the disk too: fsync the directories
			// that received one, from dir's parent up to top's.
			for d := path.Dir(dir); ; d = path.Dir(d) {
				if err := s.syncDir(d); err != nil {
					return nil, "", err
				}
				if d == path.Dir(top) || d == "." {
					break
				}
			}
		}
	}
	f, err := s.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, "", err
	}
	return f, name, nil
}

// syncDir fsyncs a directory. One that no longer exists needs nothing: a concurrent Delete
// removed it, with the entry this fsync was for.
func (s *DirObjectStore) syncDir(dir string) error {
	d, err := s.root.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Get implements ObjectStore.
func (s *DirObjectStore) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	file, _ := dirKeyPath(key)
	f, err := s.root.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, notFound(key)
	}
	if err != nil {
		return nil, fmt.Errorf("kawkab: get %q: %w", key, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("kawkab: get %q: %w", key, err)
	}
	start, end, err := CheckRange(key, st.Size(), off, n)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, end-start)
	if _, err := f.ReadAt(buf, start); err != nil && !(errors.Is(err, io.EOF) && len(buf) == 0) {
		return nil, fmt.Errorf("kawkab: get %q: %w", key, err)
	}
	return buf, nil
}

// Delete implements ObjectStore.
func (s *DirObjectStore) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateKey(key); err != nil {
		return err
	}
	file, dir := dirKeyPath(key)
	err := s.root.Remove(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kawkab: delete %q: %w", key, err)
	}
	if err := s.syncDir(dir); err != nil {
		return fmt.Errorf("kawkab: delete %q: fsync directory: %w", key, err)
	}
	// Remove the directories this left empty, deepest first; one that is not empty stops it.
	s.dirs.Lock()
	defer s.dirs.Unlock()
	for d := dir; d != "."; d = path.Dir(d) {
		if err := s.root.Remove(d); err != nil {
			break
		}
	}
	return nil
}

// List implements ObjectStore.
func (s *DirObjectStore) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	var out []ObjectInfo
	if err := s.walk(ctx, ".", "", prefix, &out); err != nil {
		return nil, fmt.Errorf("kawkab: list %q: %w", prefix, err)
	}
	sortInfos(out)
	return out, nil
}

// walk lists the objects under dir, whose keys all start with partial.
func (s *DirObjectStore) walk(ctx context.Context, dir, partial, prefix string, out *[]ObjectInfo) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d, err := s.root.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed by a concurrent Delete
	}
	if err != nil {
		return err
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed between the open and the read (Linux: ENOENT from getdents)
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		var suffix string
		switch {
		case strings.HasSuffix(name, dirObjSuffix):
			suffix = dirObjSuffix
		case strings.HasSuffix(name, dirSegSuffix):
			suffix = dirSegSuffix
		case strings.HasSuffix(name, dirPieceSuffix):
			suffix = dirPieceSuffix
		default:
			continue
		}
		seg, ok := unescapeName(strings.TrimSuffix(name, suffix))
		if !ok {
			continue
		}
		child := path.Join(dir, name)
		if suffix == dirObjSuffix {
			if !e.Type().IsRegular() {
				continue
			}
			key := partial + seg
			if !strings.HasPrefix(key, prefix) {
				continue
			}
			info, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted meanwhile
			}
			if err != nil {
				return err
			}
			*out = append(*out, ObjectInfo{Key: key, Size: info.Size()})
			continue
		}
		if !e.IsDir() {
			continue
		}
		next := partial + seg
		if suffix == dirSegSuffix {
			next += "/"
		}
		// Every key below starts with next: skip the subtree unless it can match prefix.
		if !strings.HasPrefix(next, prefix) && !strings.HasPrefix(prefix, next) {
			continue
		}
		if err := s.walk(ctx, child, next, prefix, out); err != nil {
			return err
		}
	}
	return nil
}
