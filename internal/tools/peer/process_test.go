package peer

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestProcessLifecycle(t *testing.T) {
	var p Process
	if exited, err := p.Exited(); !exited || err == nil {
		t.Fatal("a process never started must count as exited, with a reason")
	}
	if err := p.Kill(time.Second); err != nil {
		t.Fatalf("killing a process never started: %v", err)
	}
	log := filepath.Join(t.TempDir(), "node.log")
	h := Host{Name: "h1", Region: "r1", Addr: "127.0.0.1"}
	// A shell that starts a child: the kill must reach the whole group.
	if _, err := p.Start(context.Background(), h, log, "", "=== header", "sh", "-c", "echo started; sleep 60 & wait"); err != nil {
		t.Fatal(err)
	}
	if !p.Running() {
		t.Fatal("not running after Start")
	}
	if err := p.Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if p.Running() {
		t.Fatal("running after Kill")
	}
	b, _ := os.ReadFile(log)
	if !strings.HasPrefix(string(b), "=== header\n") {
		t.Fatalf("log %q must start with the header", b)
	}
	if _, err := p.Start(context.Background(), h, filepath.Join(t.TempDir(), "missing", "x.log"), "", "", "true"); err == nil {
		t.Fatal("an unwritable log must fail Start")
	}
}
