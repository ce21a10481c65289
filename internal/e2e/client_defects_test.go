package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"meridian/client"
)

// Issue 12, defect 3: with a node SIGSTOPped, a Go client call without a deadline waited as
// long as the pause, and the CLI with --timeout 2s gave up after 7 s with gRPC's generic
// message. Now every call has a deadline, and the error names the node that did not answer
// and the bound that passed.
func TestPausedNodeCallsEndWithAClearError(t *testing.T) {
	skipShort(t)
	c := newCluster(t, threeNodes, nil)
	c.startAll()
	c.waitReady(c.names()...)
	n1 := c.node("n1")
	cl := c.client("n1")
	// Open the connection now, so the paused node holds an established connection (a new
	// one would be refused or reset by the kernel, which is not what this test is about).
	if _, err := cl.Get(context.Background(), "demo", []byte("k"), client.Consistency("QUORUM")); err != nil && client.CodeOf(err) != codes.NotFound {
		t.Fatalf("call before the pause: %v", err)
	}
	n1.pause(t)
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			n1.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	defer resume()

	// A call with no deadline of its own returns (the client's default bound) while the node
	// is still paused. The watchdog is far longer than that bound; before the fix the call
	// returned only once the node was resumed.
	done := make(chan error, 1)
	go func() {
		_, err := cl.Get(context.Background(), "demo", []byte("k"), client.Consistency("QUORUM"))
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(3 * client.DefaultCallTimeout):
		resume()
		t.Fatalf("a call without a deadline to a paused node did not return within %v", 3*client.DefaultCallTimeout)
	}
	if client.CodeOf(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "no answer from "+n1.listen+" within "+client.DefaultCallTimeout.String()) {
		t.Fatalf("call to a paused node: %v; want a timeout naming the endpoint and the bound", err)
	}

	// The CLI honours --timeout: the server's deadline plus the client's grace, and says so.
	r := runCLI(t, "kv", "--endpoint", n1.listen, "get", "demo", "k", "--timeout", "2s")
	r.mustFailOneLine(t, "timeout: no answer from "+n1.listen+" within "+(2*time.Second+client.TimeoutGrace).String())

	resume()
	eventually(t, "n1 answers after SIGCONT", func() error {
		ctx, cancel := reqCtx()
		defer cancel()
		_, err := cl.Put(ctx, "demo", []byte("k"), []byte("v"), client.Consistency("QUORUM"))
		return err
	})
}

// Issue 12, defects 5 and 7: --limit wrapped at 32 bits, a value over gRPC's message limit
// got gRPC's generic error, and the CLI could not send a value from a file or stdin.
func TestLimitsAndValuesFromFiles(t *testing.T) {
	skipShort(t)
	c := newCluster(t, threeNodes, nil)
	c.startAll()
	c.waitReady(c.names()...)
	n1 := c.node("n1").listen
	kv := func(args ...string) cliResult {
		t.Helper()
		return runCLI(t, append([]string{"kv", "--endpoint", n1}, args...)...)
	}

	for _, limit := range []string{"4294967296", "4294967297", "99999999999", "-1"} {
		kv("scan", "demo", "", "", "--limit", limit).mustFailOneLine(t, "--limit "+limit+" is out of range")
	}
	ctx, cancel := reqCtx()
	defer cancel()
	if _, _, err := c.client("n1").Scan(ctx, "demo", nil, nil, 1<<32); client.CodeOf(err) != codes.InvalidArgument {
		t.Fatalf("client scan with a limit of 2^32: %v, want invalid argument", err)
	}

	// Values over the limit, just over and far over gRPC's message limit: the documented
	// limit, from the Go client and from the CLI.
	for _, size := range []int{1<<20 + 1, 2 << 20, 100 << 20} {
		_, err := c.client("n1").Put(ctx, "demo", []byte("big"), make([]byte, size))
		if client.CodeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "limit is 1048576 (limits.max_value_bytes)") {
			t.Fatalf("put of %d bytes: %v; want the documented limit", size, err)
		}
	}
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge")
	if err := os.WriteFile(huge, make([]byte, 100<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	kv("put", "demo", "big", "--value-file", huge).mustFailOneLine(t, "value is 104857600 bytes, limit is 1048576 (limits.max_value_bytes)")

	// An 800 KiB value from a file and from stdin.
	value := bytes.Repeat([]byte("0123456789abcdef"), 800<<10/16)
	file := filepath.Join(dir, "value")
	if err := os.WriteFile(file, value, 0o644); err != nil {
		t.Fatal(err)
	}
	kv("put", "demo", "fromfile", "--value-file", file, "--consistency", "QUORUM").mustSucceed(t)
	cmd := exec.Command(binPath, "kv", "--endpoint", n1, "put", "demo", "fromstdin", "--value-file", "-", "--consistency", "QUORUM")
	cmd.Stdin = bytes.NewReader(value)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("put from stdin: %v: %s", err, out)
	}
	for _, key := range []string{"fromfile", "fromstdin"} {
		r, err := c.client("n2").Get(ctx, "demo", []byte(key), client.Consistency("QUORUM"))
		if err != nil || !bytes.Equal(r.Value, value) {
			t.Fatalf("get %s: %d bytes, err %v; want the 800 KiB value", key, len(r.Value), err)
		}
	}
	kv("put", "demo", "k", "v", "--value-file", file).mustFailOneLine(t, "either as the VALUE argument or with --value-file")
	kv("put", "demo", "k").mustFailOneLine(t, "either as the VALUE argument or with --value-file")
}
