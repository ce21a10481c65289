package peer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// The JVM peers (Cassandra, ZooKeeper) run from the jars of their Maven Central artifacts, which
// a script of the repository's scripts/ resolves into a cache outside the repository. These
// helpers find that script and run it; each peer adds its own environment variable and checks.

// FindScript looks for rel (e.g. "scripts/fetch-cassandra.sh") above the working directory, then
// above this source file (tests and `go run` from a checkout). The walk stops at the file
// system's root.
func FindScript(rel string) (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, d := range starts {
		for {
			p := filepath.Join(d, rel)
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			parent := filepath.Dir(d)
			if parent == d {
				break
			}
			d = parent
		}
	}
	return "", fmt.Errorf("peer: %s not found above the working directory or the source tree", rel)
}

// FetchLibDir runs `bash script version` (a fetch script, which downloads once and caches)
// and returns the jar directory it prints as the last word of its output. ctx bounds the run;
// progress goes to log when non-nil, and the error carries the end of the script's stderr.
func FetchLibDir(ctx context.Context, script, version string, log io.Writer) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script, version)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if log != nil {
		fmt.Fprintf(log, "peer: resolving jars with %s %s\n", script, version)
	}
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("peer: %s %s: %w\n%s", script, version, err, LastLines(stderr.String(), 20))
	}
	out := strings.Fields(stdout.String())
	if len(out) == 0 {
		return "", fmt.Errorf("peer: %s printed no lib directory\n%s", script, LastLines(stderr.String(), 20))
	}
	return out[len(out)-1], nil
}

// JarSource says where a JVM peer's jars come from, first match wins: LibDir, then the
// environment variable Env, then the directory the fetch script (Script, or DefaultScript
// found in the repository) prints after downloading Version once.
type JarSource struct {
	Peer          string // for errors: "kafka", "zookeeper"
	LibDir        string
	Env           string
	Script        string
	DefaultScript string // relative to the repository, e.g. "scripts/fetch-kafka.sh"
	Version       string
}

// ResolveLibDir returns the absolute jar directory of s, fetching it if needed.
func ResolveLibDir(ctx context.Context, s JarSource, log io.Writer) (string, error) {
	lib := s.LibDir
	if lib == "" {
		lib = os.Getenv(s.Env)
	}
	if lib == "" {
		script := s.Script
		if script == "" {
			p, err := FindScript(s.DefaultScript)
			if err != nil {
				return "", fmt.Errorf("%s: no jar directory: set Options.LibDir or $%s, or run from the repository (%w)", s.Peer, s.Env, err)
			}
			script = p
		}
		var err error
		if lib, err = FetchLibDir(ctx, script, s.Version, log); err != nil {
			return "", fmt.Errorf("%s: %w", s.Peer, err)
		}
	}
	abs, err := filepath.Abs(lib)
	if err != nil {
		return "", fmt.Errorf("%s: jar directory %q: %w", s.Peer, lib, err)
	}
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		return "", fmt.Errorf("%s: jar directory %q is not a directory (%v)", s.Peer, abs, err)
	}
	return abs, nil
}
