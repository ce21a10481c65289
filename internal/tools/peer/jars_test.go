package peer

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindScript(t *testing.T) {
	for _, rel := range []string{"scripts/fetch-cassandra.sh", "scripts/fetch-zookeeper.sh"} {
		p, err := FindScript(rel)
		if err != nil || !strings.HasSuffix(p, rel) {
			t.Errorf("%s: %q, %v", rel, p, err)
		}
	}
	if _, err := FindScript("scripts/no-such-script.sh"); err == nil {
		t.Error("a missing script found")
	}
}

func TestFetchLibDir(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.sh")
	os.WriteFile(ok, []byte("echo progress >&2\necho \"lib for $1:\"\necho /cache/x-$1/lib\n"), 0o644)
	if lib, err := FetchLibDir(context.Background(), ok, "1.2", nil); err != nil || lib != "/cache/x-1.2/lib" {
		t.Errorf("lib %q, %v", lib, err)
	}
	bad := filepath.Join(dir, "bad.sh")
	os.WriteFile(bad, []byte("echo 'no such version' >&2\nexit 1\n"), 0o644)
	if _, err := FetchLibDir(context.Background(), bad, "9", nil); err == nil || !strings.Contains(err.Error(), "no such version") {
		t.Errorf("failing script: %v", err)
	}
	silent := filepath.Join(dir, "silent.sh")
	os.WriteFile(silent, []byte("true\n"), 0o644)
	if _, err := FetchLibDir(context.Background(), silent, "9", nil); err == nil || !strings.Contains(err.Error(), "no lib directory") {
		t.Errorf("silent script: %v", err)
	}
}

func TestTailFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	// More than the 64 KB TailFile reads: the last lines still come back whole.
	var b strings.Builder
	for i := range 20000 {
		b.WriteString("line ")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString("\n")
	}
	b.WriteString("second to last\nlast\n")
	os.WriteFile(p, []byte(b.String()), 0o644)
	if got := TailFile(p, 2); got != "second to last\nlast" {
		t.Errorf("%q", got)
	}
	if got := TailFile(filepath.Join(t.TempDir(), "missing"), 2); !strings.Contains(got, "cannot read") {
		t.Errorf("%q", got)
	}
	if got := LastLines("a\nb\nc\n", 5); got != "a\nb\nc" {
		t.Errorf("%q", got)
	}
}
