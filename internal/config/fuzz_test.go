package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseConfig checks that Parse never panics, that every error is a *config.Error, and
// that an accepted configuration is complete and stays valid when validated again.
func FuzzParseConfig(f *testing.F) {
	files, err := filepath.Glob(filepath.Join(examplesDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no examples: %v", err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(base))
	f.Add([]byte(base + inlineTopo))
	f.Add([]byte("a: &a [1, *a]\n"))
	dir := f.TempDir() // relative topology paths resolve into an empty directory

	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, dir)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %q is a %T, want *config.Error", err, err)
			}
			return
		}
		if c.Topology == nil || len(c.Nodes) == 0 {
			t.Fatalf("accepted without topology or nodes: %+v", c)
		}
		ids := map[uint32]bool{}
		for _, n := range c.Nodes {
			if n.ID == 0 || ids[n.ID] || !c.Topology.HasRegion(n.Region) {
				t.Fatalf("bad node accepted: %+v", n)
			}
			ids[n.ID] = true
		}
		for _, ks := range c.Keyspaces {
			if ks.Partitions < 1 || ks.ReplicasPerRegion < 1 || len(ks.Regions) == 0 {
				t.Fatalf("bad keyspace accepted: %+v", ks)
			}
			if ks.Protocol == ProtocolQuorum {
				if _, err := QuorumOptionsOf(ks.Options); err != nil {
					t.Fatalf("accepted options do not parse: %v", err)
				}
			}
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted configuration fails Validate: %v", err)
		}
	})
}
