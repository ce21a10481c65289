package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGlobLeaseCLI creates a globlease keyspace through the CLI on a three-node cluster,
// writes through one node and reads through another, moves the key's master to another
// region, and checks that writes and reads still work, that a consistency level on a
// single-key request is refused with a clear error, and that the GlobLease metrics are
// exported.
func TestGlobLeaseCLI(t *testing.T) {
	skipShort(t)
	c := newCluster(t, threeNodes, nil)
	c.startAll()
	c.waitReady(c.names()...)
	n1, n2, n3 := c.node("n1").listen, c.node("n2").listen, c.node("n3").listen
	kv := func(endpoint string, args ...string) cliResult {
		t.Helper()
		return runCLI(t, append([]string{"kv", "--endpoint", endpoint, "--timeout", "5s"}, args...)...)
	}

	r := kv(n1, "create-keyspace", "gl", "--protocol", "globlease", "--partitions", "4",
		"--option", "lease=2s", "--option", "master_lease=500ms", "--option", "election_timeout=1s",
		"--option", "merge_bytes=0").mustSucceed(t) // (splits stay: the placement driver merges nothing)
	if !strings.Contains(r.stdout, "created keyspace gl: protocol globlease") {
		t.Fatalf("%v: want a confirmation on stdout", r)
	}

	// Other nodes learn the keyspace from the catalog, and the partitions' masters are
	// established; until then a request may fail with one of these.
	retryable := func(r cliResult) bool {
		for _, s := range []string{"unknown keyspace", "unavailable", "timeout"} {
			if strings.Contains(r.stderr, s) {
				return true
			}
		}
		return false
	}
	try := func(what string, f func() cliResult, check func(cliResult) error) {
		t.Helper()
		eventually(t, what, func() error {
			r := f()
			if r.code != 0 {
				if !retryable(r) {
					t.Fatalf("%s: %v: unexpected error", what, r)
				}
				return fmt.Errorf("%v", r)
			}
			if check != nil {
				if err := check(r); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
			}
			return nil
		})
	}
	wantValue := func(v string) func(cliResult) error {
		return func(r cliResult) error {
			if r.stdout != v+"\n" {
				return fmt.Errorf("%v: want stdout %q", r, v+"\n")
			}
			if !strings.Contains(r.stderr, "read path ") {
				return fmt.Errorf("%v: want the read path on stderr", r)
			}
			return nil
		}
	}

	try("put through n1", func() cliResult { return kv(n1, "put", "gl", "k", "v1") }, nil)
	try("get through n3", func() cliResult { return kv(n3, "get", "gl", "k") }, wantValue("v1"))

	// Keys are mastered in the first region (europe, n1) by default; move this one to us.
	try("move master to us", func() cliResult { return kv(n3, "move-master", "gl", "k", "us") }, func(r cliResult) error {
		if !strings.HasPrefix(r.stdout, `master of "k" is now n2 (region us), table version `) {
			return fmt.Errorf("%v: want the new master on stdout", r)
		}
		return nil
	})
	try("active put through n1 after the move", func() cliResult { return kv(n1, "put", "gl", "k", "v2", "--write-mode", "active") }, nil)
	for _, ep := range []string{n1, n2, n3} {
		try("get after the move", func() cliResult { return kv(ep, "get", "gl", "k") }, wantValue("v2"))
	}
	try("passive put through n3", func() cliResult { return kv(n3, "put", "gl", "k", "v3", "--write-mode", "passive") }, nil)
	try("get through n1", func() cliResult { return kv(n1, "get", "gl", "k") }, wantValue("v3"))

	// Refused with one clear line.
	kv(n1, "put", "gl", "k", "v4", "--consistency", "QUORUM").mustFailOneLine(t,
		"invalid argument", `keyspace "gl" uses protocol globlease, which takes no consistency level`, "write_mode active|passive")
	kv(n1, "get", "gl", "k", "--consistency", "ONE").mustFailOneLine(t, "takes no consistency level")
	kv(n1, "put", "gl", "k", "v4", "--write-mode", "eager").mustFailOneLine(t, `write_mode "eager"`, "active or passive")
	kv(n1, "put", "demo", "k", "v4", "--write-mode", "active").mustFailOneLine(t, "protocol quorum has no write modes")
	kv(n1, "move-master", "gl", "k", "mars").mustFailOneLine(t, `"mars" is not a region of keyspace "gl"`, "europe, us, asia")
	kv(n1, "move-master", "demo", "k", "us").mustFailOneLine(t, "has no masters to move")
	// The rejected writes changed nothing.
	try("get after rejected writes", func() cliResult { return kv(n2, "get", "gl", "k") }, wantValue("v3"))

	// A split and a merge (globlease/gl_split.go): each starts a new generation of the
	// mastership table of the range; the data stays, reads and writes go on at every node.
	kv(n1, "split", "gl", "k").mustSucceed(t)
	for _, ep := range []string{n1, n2, n3} {
		try("get after the split", func() cliResult { return kv(ep, "get", "gl", "k") }, wantValue("v3"))
	}
	try("put after the split", func() cliResult { return kv(n3, "put", "gl", "k", "v5") }, nil)
	try("put into the left half", func() cliResult { return kv(n2, "put", "gl", "j", "w1") }, nil)
	r = kv(n1, "merge", "gl", "1").mustSucceed(t)
	if !strings.Contains(r.stdout, "merged partition 1 of gl with its right-hand neighbour: 4 partitions") {
		t.Fatalf("%v: want the merge confirmed with 4 partitions", r)
	}
	for _, ep := range []string{n1, n2, n3} {
		try("get after the merge", func() cliResult { return kv(ep, "get", "gl", "k") }, wantValue("v5"))
		try("get the left half's key after the merge", func() cliResult { return kv(ep, "get", "gl", "j") }, wantValue("w1"))
	}

	// The gets above were counted under their read paths.
	reads := 0.0
	for _, name := range c.names() {
		m := scrape(t, c.node(name).metrics)
		for _, path := range []string{"master", "lease", "forwarded", "affiliate"} {
			v, ok := m[`meridian_globlease_reads_total{path="`+path+`"}`]
			if !ok {
				t.Fatalf("%s: /metrics has no meridian_globlease_reads_total{path=%q}", name, path)
			}
			reads += v
		}
		for _, series := range []string{`meridian_globlease_writes_total{mode="active"}`, "meridian_globlease_master_moves_total", "meridian_globlease_hot_keys"} {
			if _, ok := m[series]; !ok {
				t.Fatalf("%s: /metrics has no %s", name, series)
			}
		}
	}
	if reads < 1 {
		t.Errorf("meridian_globlease_reads_total sums to %v over the cluster, want at least 1", reads)
	}
}

// scrape returns the samples of a node's /metrics page by series (name and labels as
// printed).
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	cl := &http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scraping %s: %v", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("scraping %s: %s: %s", addr, resp.Status, b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("scraping %s: %v", addr, err)
	}
	return out
}
