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

func TestProcessStop(t *testing.T) {
	var p Process
	if err := p.Stop(time.Second, time.Second); err != nil {
		t.Fatalf("stopping a process never started: %v", err)
	}
	h := Host{Name: "h1", Region: "r1", Addr: "127.0.0.1"}
	dir := t.TempDir()
	// A process that exits on SIGTERM, after writing that it did.
	if _, err := p.Start(context.Background(), h, filepath.Join(dir, "term.log"), "", "", "sh", "-c",
		"trap 'echo terminated; exit 0' TERM; while :; do sleep 0.1; done"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // let the shell install its trap
	began := time.Now()
	if err := p.Stop(10*time.Second, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if p.Running() || time.Since(began) > 5*time.Second {
		t.Fatalf("still running %v after SIGTERM", time.Since(began))
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "term.log")); !strings.Contains(string(b), "terminated") {
		t.Fatalf("log %q: the process did not see SIGTERM", b)
	}
	// A process that ignores SIGTERM is killed after the grace period.
	var q Process
	if _, err := q.Start(context.Background(), h, filepath.Join(dir, "ignore.log"), "", "", "sh", "-c",
		"trap '' TERM; while :; do sleep 0.1; done"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := q.Stop(300*time.Millisecond, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if q.Running() {
		t.Fatal("a process ignoring SIGTERM still runs after Stop")
	}
	if err := q.Stop(time.Second, time.Second); err != nil {
		t.Fatalf("stopping an exited process: %v", err)
	}
}
