package kawkab_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"meridian/internal/kawkab"
	"meridian/internal/kawkab/objstoretest"
)

func TestMemObjectStoreConformance(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) kawkab.ObjectStore { return kawkab.NewMemObjectStore() }, objstoretest.Options{})
}

func openDir(t *testing.T, dir string) *kawkab.DirObjectStore {
	t.Helper()
	s, err := kawkab.OpenDirObjectStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestDirObjectStoreConformance(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) kawkab.ObjectStore { return openDir(t, t.TempDir()) }, objstoretest.Options{})
}

// The model in front of a memory store, on the real clock with latencies of microseconds:
// the suite checks that the wrapper keeps every rule (and exercises the real clock).
func TestModelledObjectStoreConformance(t *testing.T) {
	fast := kawkab.S3Model{
		FirstByteMedian:    20 * time.Microsecond,
		FirstByteP99:       100 * time.Microsecond,
		GetBandwidth:       20e9,
		PutBandwidth:       20e9,
		AggregateBandwidth: 40e9,
		ListPageKeys:       1000,
		Seed:               1,
	}
	objstoretest.Run(t, func(t *testing.T) kawkab.ObjectStore {
		return &kawkab.ModelledObjectStore{Inner: kawkab.NewMemObjectStore(), Model: fast}
	}, objstoretest.Options{})
}

func TestValidateKey(t *testing.T) {
	for _, k := range []string{"a", "kawkab/s1/d0", strings.Repeat("x", 1024), "..", "a\x01b", "ü"} {
		if err := kawkab.ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q): %v", k, err)
		}
	}
	for k, why := range map[string]string{
		"":                        "empty",
		strings.Repeat("x", 1025): "1025 bytes, longer than 1024",
		"a\x00":                   "NUL byte at 1",
		"\xc3":                    "not valid UTF-8",
	} {
		err := kawkab.ValidateKey(k)
		if !errors.Is(err, kawkab.ErrInvalidKey) || !strings.Contains(err.Error(), why) {
			t.Errorf("ValidateKey(%.20q) = %v, want ErrInvalidKey saying %q", k, err, why)
		}
	}
	if err := kawkab.ValidatePrefix(""); err != nil {
		t.Errorf("ValidatePrefix(\"\"): %v", err)
	}
}

func TestCheckRangeMessage(t *testing.T) {
	_, _, err := kawkab.CheckRange("k", 100, 90, 20)
	if !errors.Is(err, kawkab.ErrInvalidRange) || !strings.Contains(err.Error(), "[90, 90+20)") || !strings.Contains(err.Error(), "100 bytes") {
		t.Errorf("CheckRange error %q does not say the range and the size", err)
	}
}

// Every file the directory store writes lies inside its directory, under names of [a-z0-9_-%.]
// only, whatever the key: no ".." or absolute path escapes.
func TestDirObjectStorePathsStayInside(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "store")
	s := openDir(t, dir)
	ctx := context.Background()
	keys := append(slices.Clone(objstoretest.OddKeys), "../../escape", "/etc/passwd", "a/../../../b", strings.Repeat("../", 100))
	for _, k := range keys {
		if err := s.Put(ctx, k, []byte(k)); err != nil {
			t.Fatalf("Put(%q): %v", k, err)
		}
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "store" {
		t.Fatalf("files outside the store's directory: %v", entries)
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		name := d.Name()
		if name == "." || name == ".." || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789_-%ABCDEF.") != "" || len(name) > 255 {
			t.Errorf("unexpected name %q in %s", name, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	infos, err := s.List(ctx, "")
	if err != nil || len(infos) != len(keys) {
		t.Fatalf("List: %d keys, %v; want %d", len(infos), err, len(keys))
	}
	for _, k := range keys {
		if err := s.Delete(ctx, k); err != nil {
			t.Fatalf("Delete(%q): %v", k, err)
		}
	}
	// Deletes leave no empty directories behind.
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("left after deleting every object: %v", entries)
	}
}

func TestDirObjectStoreLayout(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir)
	ctx := context.Background()
	for _, k := range []string{"kawkab/s1/d0", "a", "a/b", "Upper.x"} {
		if err := s.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"kawkab.d/s1.d/d0.o", "a.o", "a.d/b.o", "%55pper%2Ex.o"} {
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(p))); err != nil {
			t.Errorf("expected file %s: %v", p, err)
		}
	}
}

// A crash can leave temporary files, and other programs other files: List skips both, and the
// objects survive reopening the store.
func TestDirObjectStoreReopenAndStrayFiles(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := kawkab.OpenDirObjectStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "kawkab/s1/d0", []byte("chunk")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, stray := range []string{"kawkab.d/.tmp-00ff00ff00ff00ff", "README", "kawkab.d/notes.txt", "kawkab.d/X.o", "kawkab.d/%61.o"} {
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(stray)), []byte("junk"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s = openDir(t, dir)
	infos, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(infos, []kawkab.ObjectInfo{{Key: "kawkab/s1/d0", Size: 5}}) {
		t.Fatalf("List after reopen = %v", infos)
	}
	if got, err := s.Get(ctx, "kawkab/s1/d0", 1, 3); err != nil || string(got) != "hun" {
		t.Fatalf("Get after reopen = %q, %v", got, err)
	}
}
