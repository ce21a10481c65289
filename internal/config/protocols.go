package config

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Protocol names.
const (
	ProtocolQuorum = "quorum"
)

// OptionSpec describes one option of a protocol.
type OptionSpec struct {
	Name    string
	Default string // canonical form; filled in when the option is absent
	Doc     string
	// Normalize validates a value and returns its canonical form.
	Normalize func(value string) (string, error)
}

// ProtocolSpec describes a replication protocol a keyspace can use, with its options.
type ProtocolSpec struct {
	Name    string
	Doc     string
	Options []OptionSpec
}

// protocols is the table of known protocols. A new protocol adds its entry here (and its
// typed accessor, like QuorumOptionsOf, below).
var protocols = []ProtocolSpec{
	{
		Name: ProtocolQuorum,
		Doc:  "majority quorum replication, Cassandra-style levels, last-writer-wins by (timestamp, node id)",
		Options: []OptionSpec{
			{
				Name:      "read_level",
				Default:   string(LevelQuorum),
				Doc:       "consistency level of reads that do not name one: ONE, QUORUM, ALL, LOCAL_ONE, LOCAL_QUORUM (case-insensitive)",
				Normalize: normalizeLevel,
			},
			{
				Name:      "write_level",
				Default:   string(LevelQuorum),
				Doc:       "consistency level of writes that do not name one: ONE, QUORUM, ALL, LOCAL_ONE, LOCAL_QUORUM (case-insensitive)",
				Normalize: normalizeLevel,
			},
			{
				Name:      "speculative_retry",
				Default:   "0s",
				Doc:       "how long a read waits for a replica before asking another one; a Go duration ≥ 0, 0 = automatic",
				Normalize: normalizeNonNegativeDuration,
			},
		},
	},
}

func normalizeLevel(v string) (string, error) {
	l, err := ParseLevel(v)
	return string(l), err
}

func normalizeNonNegativeDuration(v string) (string, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return "", fmt.Errorf("invalid duration %q (want a Go duration such as \"5ms\")", v)
	}
	if d < 0 {
		return "", fmt.Errorf("must be ≥ 0, got %s", d)
	}
	return d.String(), nil
}

// Protocols returns the names of the known protocols, sorted.
func Protocols() []string {
	names := make([]string, len(protocols))
	for i, p := range protocols {
		names[i] = p.Name
	}
	sort.Strings(names)
	return names
}

// Protocol returns the description of a known protocol.
func Protocol(name string) (ProtocolSpec, bool) {
	for _, p := range protocols {
		if p.Name == name {
			return p, true
		}
	}
	return ProtocolSpec{}, false
}

// optionError is an invalid protocol option; key is "" when the problem is not one key.
type optionError struct {
	key string
	msg string
}

// normalizeOptions validates opts against the protocol's table and returns a new map with
// every option in canonical form and the defaults filled in. Keys are checked in sorted
// order so the first error is deterministic.
func normalizeOptions(p ProtocolSpec, opts map[string]string) (map[string]string, *optionError) {
	known := make(map[string]OptionSpec, len(p.Options))
	names := make([]string, 0, len(p.Options))
	for _, o := range p.Options {
		known[o.Name] = o
		names = append(names, o.Name)
	}
	sort.Strings(names)
	keys := make([]string, 0, len(opts))
	for k := range opts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(map[string]string, len(p.Options))
	for _, k := range keys {
		o, ok := known[k]
		if !ok {
			valid := "none"
			if len(names) > 0 {
				valid = strings.Join(names, ", ")
			}
			return nil, &optionError{key: k, msg: fmt.Sprintf("unknown option for protocol %s (known: %s)", p.Name, valid)}
		}
		v, err := o.Normalize(opts[k])
		if err != nil {
			return nil, &optionError{key: k, msg: err.Error()}
		}
		out[k] = v
	}
	for _, o := range p.Options {
		if _, ok := out[o.Name]; !ok {
			out[o.Name] = o.Default
		}
	}
	return out, nil
}

// QuorumOptions are the typed options of a quorum keyspace.
type QuorumOptions struct {
	ReadLevel        Level         // default level of reads
	WriteLevel       Level         // default level of writes
	SpeculativeRetry time.Duration // 0 = automatic
}

// QuorumOptionsOf parses the options of a quorum keyspace. Missing options take their
// defaults, so it also works on options that were never validated.
func QuorumOptionsOf(opts map[string]string) (QuorumOptions, error) {
	p, _ := Protocol(ProtocolQuorum)
	norm, oerr := normalizeOptions(p, opts)
	if oerr != nil {
		return QuorumOptions{}, fmt.Errorf("options.%s: %s", oerr.key, oerr.msg)
	}
	d, err := time.ParseDuration(norm["speculative_retry"])
	if err != nil {
		return QuorumOptions{}, fmt.Errorf("options.speculative_retry: %v", err)
	}
	return QuorumOptions{
		ReadLevel:        Level(norm["read_level"]),
		WriteLevel:       Level(norm["write_level"]),
		SpeculativeRetry: d,
	}, nil
}
