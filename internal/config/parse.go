package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"meridian/internal/topology"
	"meridian/internal/topology/strictyaml"
)

// maxConfigBytes bounds the size of a configuration file read by Load.
const maxConfigBytes = 4 << 20

// InlineTopology is the TopologyRef (and topology name) of a topology described inline with
// regions, rtt_ms and intra_region_rtt_ms.
const InlineTopology = "inline"

// rawCluster is the schema of the file. Nodes, keyspaces, limits and the rest decode
// straight into the exported types (their yaml tags); the topology is resolved afterwards.
type rawCluster struct {
	Cluster  string `yaml:"cluster"`
	Topology string `yaml:"topology"`
	// Inline topology, instead of Topology.
	Regions          []string                      `yaml:"regions"`
	RTTMs            map[string]map[string]float64 `yaml:"rtt_ms"`
	IntraRegionRTTMs map[string]float64            `yaml:"intra_region_rtt_ms"`

	Clock       Clock       `yaml:"clock"`
	Nodes       []Node      `yaml:"nodes"`
	Keyspaces   []Keyspace  `yaml:"keyspaces"`
	Limits      Limits      `yaml:"limits"`
	AntiEntropy AntiEntropy `yaml:"anti_entropy"`
	Metadata    Metadata    `yaml:"metadata"`
	Elasticity  Elasticity  `yaml:"elasticity"`
	BwMan       BwMan       `yaml:"bwman"`
	Network     Network     `yaml:"network"`
	Streams     Streams     `yaml:"streams"`
}

// Load reads, parses and validates a configuration file. A topology file named in it is
// resolved relative to the configuration file's directory.
func Load(path string) (*Cluster, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{File: path, Msg: err.Error(), Err: err}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, &Error{File: path, Msg: err.Error(), Err: err}
	}
	if len(data) > maxConfigBytes {
		return nil, &Error{File: path, Msg: fmt.Sprintf("larger than %d bytes", maxConfigBytes)}
	}
	return parse(data, filepath.Dir(path), path)
}

// Parse parses and validates a configuration. A topology file named in it is resolved
// relative to baseDir ("" means the current directory).
func Parse(data []byte, baseDir string) (*Cluster, error) {
	return parse(data, baseDir, "")
}

func parse(data []byte, baseDir, file string) (*Cluster, error) {
	var raw rawCluster
	lines, err := strictyaml.Unmarshal(data, &raw)
	if err != nil {
		var se *strictyaml.Error
		if errors.As(err, &se) {
			return nil, &Error{File: file, Line: se.Line, Path: se.Path, Msg: se.Msg}
		}
		return nil, &Error{File: file, Msg: err.Error(), Err: err}
	}
	locate := func(err error) error {
		var e *Error
		if errors.As(err, &e) {
			e.File = file
			if e.Line == 0 {
				e.Line = lines.Line(e.Path)
			}
		}
		return err
	}

	c := &Cluster{
		Name:        raw.Cluster,
		Clock:       raw.Clock,
		Nodes:       raw.Nodes,
		Keyspaces:   raw.Keyspaces,
		Limits:      raw.Limits,
		AntiEntropy: raw.AntiEntropy,
		Elasticity:  raw.Elasticity,
		BwMan:       raw.BwMan,
		Network:     raw.Network,
		Streams:     raw.Streams,
		Metadata:    raw.Metadata,
	}
	if err := validateName(c.Name); err != nil {
		return nil, locate(err)
	}
	if err := resolveTopology(c, &raw, lines, baseDir, file); err != nil {
		return nil, locate(err)
	}
	if err := c.validate(lines.Has); err != nil {
		return nil, locate(err)
	}
	return c, nil
}

// resolveTopology sets c.Topology and c.TopologyRef from the topology field or from the
// inline description.
func resolveTopology(c *Cluster, raw *rawCluster, lines strictyaml.Lines, baseDir, file string) error {
	var inline []string
	for _, f := range []string{"regions", "rtt_ms", "intra_region_rtt_ms"} {
		if lines.Has(f) {
			inline = append(inline, f)
		}
	}
	_, hasRef := lines["topology"]
	builtins := strings.Join(topology.BuiltinNames(), ", ")

	switch {
	case hasRef && len(inline) > 0:
		return errorf(inline[0], "cannot be combined with topology: either name a topology or describe one inline with regions, rtt_ms and intra_region_rtt_ms")
	case !hasRef && len(inline) == 0:
		return errorf("topology", "required: name a built-in topology (%s), a topology file, or describe one inline with regions and rtt_ms", builtins)
	case len(inline) > 0:
		if !lines.Has("regions") {
			return errorf(inline[0], "an inline topology needs regions")
		}
		source := "inline in the configuration"
		if file != "" {
			source = "inline in " + file
		}
		t, err := topology.New(topology.Spec{
			Name:             InlineTopology,
			Source:           source,
			Regions:          raw.Regions,
			RTTMs:            raw.RTTMs,
			IntraRegionRTTMs: raw.IntraRegionRTTMs,
		})
		if err != nil {
			var te *topology.Error
			if errors.As(err, &te) {
				return errorf(te.Path, "%s", te.Msg)
			}
			return errorf("regions", "%v", err)
		}
		c.Topology, c.TopologyRef = t, InlineTopology
		return nil
	}

	ref := raw.Topology
	if strings.TrimSpace(ref) == "" {
		return errorf("topology", "must not be empty: name a built-in topology (%s) or a topology file", builtins)
	}
	if topology.IsBuiltin(ref) {
		t, err := topology.Builtin(ref)
		if err != nil {
			return &Error{Path: "topology", Msg: err.Error(), Err: err}
		}
		c.Topology, c.TopologyRef = t, ref
		return nil
	}
	path := ref
	if !filepath.IsAbs(path) {
		path = filepath.Join(baseDir, path)
	}
	t, err := topology.Load(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return &Error{Path: "topology", Err: err, Msg: fmt.Sprintf("%q is neither a built-in topology (%s) nor an existing topology file (looked for %s)", ref, builtins, path)}
		}
		return &Error{Path: "topology", Msg: err.Error(), Err: err}
	}
	c.Topology, c.TopologyRef = t, ref
	return nil
}
