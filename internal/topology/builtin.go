package topology

import (
	"embed"
	"fmt"
	"path"
	"sort"
	"strings"
)

// The built-in topologies: the measured wide-area latencies of the seed papers, copied
// unchanged from /work/shared/topologies (see that directory's README.md for provenance).
// A file's name (without .yaml) is the topology's name.
//
//go:embed builtin/*.yaml
var builtinFS embed.FS

// BuiltinNames returns the names of the built-in topologies, sorted.
func BuiltinNames() []string {
	entries, err := builtinFS.ReadDir("builtin")
	if err != nil {
		panic("topology: embedded builtin directory: " + err.Error())
	}
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".yaml"); ok && !e.IsDir() {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// IsBuiltin reports whether name is the name of a built-in topology.
func IsBuiltin(name string) bool {
	for _, n := range BuiltinNames() {
		if n == name {
			return true
		}
	}
	return false
}

// Builtin returns a fresh copy of the built-in topology called name. The error for an unknown
// name lists the built-in names.
func Builtin(name string) (*Topology, error) {
	if !IsBuiltin(name) {
		return nil, fmt.Errorf("unknown built-in topology %q (built-in: %s)", name, strings.Join(BuiltinNames(), ", "))
	}
	file := path.Join("builtin", name+".yaml")
	data, err := builtinFS.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("topology: reading embedded %s: %w", file, err)
	}
	t, err := Parse(data, file)
	if err != nil {
		return nil, err
	}
	if t.Name != name {
		return nil, fmt.Errorf("topology: embedded %s is named %q, want %q", file, t.Name, name)
	}
	return t, nil
}
