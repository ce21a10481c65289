package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLI drives the meridian binary's kv commands against a three-node cluster, and checks
// that bad input — to the client commands and to the server — is reported as one line on
// stderr with a non-zero exit.
func TestCLI(t *testing.T) {
	skipShort(t)
	c := newCluster(t, threeNodes, nil)
	c.startAll()
	c.waitReady(c.names()...)
	n1, n2, n3 := c.node("n1").listen, c.node("n2").listen, c.node("n3").listen
	kv := func(endpoint string, args ...string) cliResult {
		t.Helper()
		return runCLI(t, append([]string{"kv", "--endpoint", endpoint}, args...)...)
	}

	t.Run("put-get-delete-scan", func(t *testing.T) {
		// Keys spread over several partitions (partition i starts at byte i*16).
		kvs := [][2]string{
			{"!bang", "exclaim"}, {"0zero", "0"}, {"Alpha", "upper"}, {"alpha", "lower"},
			{"bravo", "to be deleted"}, {"charlie", "c h a r"}, {"quebec", "q"}, {"~tilde", "~"},
			{"é-accent", "ü"},
		}
		for _, p := range kvs {
			kv(n1, "put", "demo", p[0], p[1], "--consistency", "QUORUM").mustSucceed(t)
		}
		for _, p := range kvs {
			r := kv(n3, "get", "demo", p[0], "--consistency", "QUORUM").mustSucceed(t)
			if r.stdout != p[1]+"\n" {
				t.Fatalf("%v: want stdout %q", r, p[1]+"\n")
			}
		}

		kv(n2, "delete", "demo", "bravo", "--consistency", "QUORUM").mustSucceed(t)
		r := kv(n3, "get", "demo", "bravo", "--consistency", "QUORUM")
		r.mustFailOneLine(t, "not found", "bravo")
		if r.stdout != "" {
			t.Fatalf("%v: want nothing on stdout", r)
		}

		want := "!bang\texclaim\n0zero\t0\nAlpha\tupper\nalpha\tlower\ncharlie\tc h a r\nquebec\tq\n~tilde\t~\né-accent\tü\n"
		r = kv(n2, "scan", "demo", "", "", "--consistency", "QUORUM").mustSucceed(t)
		if r.stdout != want {
			t.Fatalf("%v: want stdout %q", r, want)
		}
		r = kv(n1, "scan", "demo", "", "", "--limit", "3", "--consistency", "QUORUM").mustSucceed(t)
		if want3 := "!bang\texclaim\n0zero\t0\nAlpha\tupper\n"; r.stdout != want3 {
			t.Fatalf("%v: want stdout %q", r, want3)
		}
		if !strings.Contains(r.stderr, "more keys") {
			t.Fatalf("%v: a scan cut short by --limit should say there are more keys", r)
		}
		r = kv(n3, "scan", "demo", "alpha", "quebec", "--consistency", "ONE").mustSucceed(t)
		if wantR := "alpha\tlower\ncharlie\tc h a r\n"; r.stdout != wantR {
			t.Fatalf("%v: want stdout %q", r, wantR)
		}
	})

	t.Run("create-keyspace", func(t *testing.T) {
		r := kv(n1, "create-keyspace", "ks_e2e", "--partitions", "4").mustSucceed(t)
		if !strings.Contains(r.stdout, "created keyspace ks_e2e") {
			t.Fatalf("%v: want a confirmation on stdout", r)
		}
		// The create returned once every node had installed the keyspace (issue 12: a far
		// node answered "unknown keyspace" for a while): every node serves it at once.
		for _, n := range []string{n2, n3} {
			kv(n, "describe-keyspace", "ks_e2e").mustSucceed(t)
		}
		kv(n3, "put", "ks_e2e", "greeting", "hello world", "--consistency", "QUORUM").mustSucceed(t)
		r = kv(n3, "get", "ks_e2e", "greeting", "--consistency", "QUORUM").mustSucceed(t)
		if r.stdout != "hello world\n" {
			t.Fatalf("%v: want stdout %q", r, "hello world\n")
		}
		r = kv(n1, "create-keyspace", "ks_e2e")
		r.mustFailOneLine(t, "already exists")
	})

	t.Run("describe-keyspace", func(t *testing.T) {
		r := kv(n2, "describe-keyspace", "demo").mustSucceed(t)
		lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
		if !strings.HasPrefix(lines[0], "keyspace demo ") {
			t.Fatalf("%v: first line should describe keyspace demo", r)
		}
		parts := 0
		for _, l := range lines[1:] {
			if strings.HasPrefix(strings.TrimSpace(l), "partition ") {
				parts++
				for _, n := range c.names() {
					if !strings.Contains(l, n) {
						t.Fatalf("%v: partition line %q does not list replica %s", r, l, n)
					}
				}
			}
		}
		if parts != 16 {
			t.Fatalf("%v: %d partition lines, want 16", r, parts)
		}
	})

	t.Run("raft-alter-drop-list", func(t *testing.T) {
		kv(n1, "create-keyspace", "rks", "--protocol", "raft", "--partitions", "2", "--option", "leader_region=europe").mustSucceed(t)
		kv(n2, "put", "rks", "k", "v1").mustSucceed(t)
		// A stale read at a follower: once it has applied the write, with its bound.
		eventually(t, "a stale read at n3 sees the write", func() error {
			r := kv(n3, "get", "rks", "k", "--consistency", "STALE")
			if r.code != 0 || r.stdout != "v1\n" || !strings.Contains(r.stderr, "read path stale") {
				return errString(r.String())
			}
			return nil
		})
		r := kv(n1, "get", "rks", "k").mustSucceed(t)
		if r.stdout != "v1\n" {
			t.Fatalf("%v: want stdout %q", r, "v1\n")
		}
		r = kv(n1, "list-keyspaces").mustSucceed(t)
		if !strings.Contains(r.stdout, "rks\traft\t") || !strings.Contains(r.stdout, "demo\tquorum\t") {
			t.Fatalf("%v: want rks (raft) and demo (quorum) listed", r)
		}
		// A change conditional on a version it is not at is refused and changes nothing.
		kv(n2, "alter-keyspace", "rks", "--option", "heartbeat_interval=100ms", "--expect-version", "1").mustFailOneLine(t, "changed concurrently")
		kv(n2, "alter-keyspace", "rks", "--option", "heartbeat_interval=100ms").mustSucceed(t)
		r = kv(n3, "describe-keyspace", "rks").mustSucceed(t)
		if !strings.Contains(r.stdout, "heartbeat_interval:100ms") {
			t.Fatalf("%v: want the altered option", r)
		}
		kv(n3, "drop-keyspace", "rks").mustSucceed(t)
		kv(n1, "get", "rks", "k").mustFailOneLine(t, `unknown keyspace "rks"`)
		kv(n1, "drop-keyspace", "rks").mustFailOneLine(t, "rks")
	})

	t.Run("bad-input", func(t *testing.T) {
		kv(n1, "get", "nosuch", "k", "--consistency", "QUORUM").mustFailOneLine(t, `unknown keyspace "nosuch"`)
		kv(n1, "put", "nosuch", "k", "v", "--consistency", "QUORUM").mustFailOneLine(t, `unknown keyspace "nosuch"`)
		long := strings.Repeat("k", 1025)
		kv(n1, "put", "demo", long, "v", "--consistency", "QUORUM").mustFailOneLine(t, "1025", "max_key_bytes")
		kv(n1, "get", "demo", long, "--consistency", "QUORUM").mustFailOneLine(t, "max_key_bytes")
		kv(n1, "get", "demo", "k", "--consistency", "FOO").mustFailOneLine(t, "FOO")
		kv(n1, "put", "demo", "k", "v", "--consistency", "FOO").mustFailOneLine(t, "FOO")
		kv(n1, "scan", "demo", "", "", "--limit", "20000", "--consistency", "QUORUM").mustFailOneLine(t, "20000", "max_scan_limit")
		kv(n1, "get", "demo", "k", "--timeout", "2m", "--consistency", "QUORUM").mustFailOneLine(t, "max_request_timeout")
		kv(n1, "put", "demo", "k", "v", "--timeout", "2m", "--consistency", "QUORUM").mustFailOneLine(t, "max_request_timeout")
		// Nothing was written by the rejected puts.
		kv(n2, "get", "demo", "k", "--consistency", "ALL").mustFailOneLine(t, "not found")
	})

	t.Run("txn", func(t *testing.T) {
		// A keyspace without transactions says so, and how to get one.
		kv(n1, "txn", "demo", "-e", "get k; put k v").mustFailOneLine(t, `keyspace "demo" is not transactional (txn_mode none)`, "txn_mode sdur")
		// Script errors name the line; nothing is sent.
		kv(n1, "txn", "demo", "-e", "get k\nset k v").mustFailOneLine(t, "line 2", `unknown statement "set"`)
		kv(n1, "txn", "demo").mustFailOneLine(t, "-e SCRIPT", "--file")
		kv(n1, "txn", "demo", "-e", "get k", "--consistency", "ONE").mustFailOneLine(t, "--consistency does not apply")

		kv(n1, "create-keyspace", "tks", "--protocol", "raft", "--partitions", "2", "--option", "txn_mode=sdur").mustSucceed(t)
		kv(n2, "put", "tks", "a", "1").mustFailOneLine(t, `keyspace "tks" is transactional (txn_mode sdur): write through TxnCommit`)
		// The first transaction commits once the groups have leaders.
		eventually(t, "a transaction commits", func() error {
			r := kv(n2, "txn", "tks", "-e", `put a 1; put "\xf0b" 2`)
			if r.code != 0 || !strings.HasPrefix(r.stdout, "committed txn ") {
				return errString(r.String())
			}
			return nil
		})
		eventually(t, "a transaction reads the writes", func() error {
			r := kv(n3, "txn", "tks", "-e", "get a\nget \"\\xf0b\"\nget zz\nput a 0\nget a")
			want := "a = 1\n\"\\xf0b\" = 2\nzz not found\na = 0\ncommitted txn "
			if r.code != 0 || !strings.HasPrefix(r.stdout, want) {
				return errString(r.String())
			}
			return nil
		})
		// From stdin through --file -, ending in abort: nothing written.
		script := filepath.Join(t.TempDir(), "script")
		if err := os.WriteFile(script, []byte("# drain a\nput a 999\nabort\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r := kv(n1, "txn", "tks", "--file", script).mustSucceed(t)
		if r.stdout != "aborted by the script: nothing written\n" {
			t.Fatalf("%v: want the script's abort on stdout", r)
		}
		r = kv(n1, "txn", "tks", "-e", "get a; commit").mustSucceed(t)
		if !strings.HasPrefix(r.stdout, "a = 0\n") {
			t.Fatalf("%v: want a = 0 (the script's abort wrote nothing)", r)
		}

		// Catenae: one partition replicated whole in every region, options fixed.
		kv(n1, "create-keyspace", "cks", "--protocol", "catenae", "--partitions", "4").mustFailOneLine(t, "one partition, got 4")
		kv(n1, "create-keyspace", "cks", "--protocol", "catenae", "--option", "epoch_length=20ms").mustSucceed(t)
		eventually(t, "a catenae transaction commits", func() error {
			r := kv(n2, "txn", "cks", "-e", "put c 1; put d 2")
			if r.code != 0 || !strings.HasPrefix(r.stdout, "committed txn ") {
				return errString(r.String())
			}
			return nil
		})
		eventually(t, "every region reads it", func() error {
			r := kv(n3, "txn", "cks", "-e", "get c; get d; put c 3")
			if r.code != 0 || !strings.HasPrefix(r.stdout, "c = 1\nd = 2\ncommitted txn ") {
				return errString(r.String())
			}
			return nil
		})
		kv(n1, "alter-keyspace", "cks", "--option", "epoch_length=10ms").mustFailOneLine(t, "fixed when it is created")
		kv(n1, "put", "cks", "c", "1").mustFailOneLine(t, "transactional (txn_mode catenae)")
	})

	t.Run("server-bad-config", func(t *testing.T) {
		// An unknown field in the second node's entry.
		bad := strings.Replace(c.cfgYAML, "    region: us\n", "    region: us\n    zone: us-east1-b\n", 1)
		if bad == c.cfgYAML {
			t.Fatalf("could not inject the unknown field into:\n%s", c.cfgYAML)
		}
		path := filepath.Join(t.TempDir(), "bad.yaml")
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		r := runCLI(t, "server", "--config", path, "--node", "n1", "--data-dir", filepath.Join(t.TempDir(), "d"))
		r.mustFailOneLine(t, "nodes[1].zone")
	})

	t.Run("server-unknown-node", func(t *testing.T) {
		r := runCLI(t, "server", "--config", c.cfgPath, "--node", "n9", "--data-dir", filepath.Join(t.TempDir(), "d"))
		r.mustFailOneLine(t, `"n9"`)
	})
}
