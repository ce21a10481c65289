package config

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Protocol names.
const (
	ProtocolQuorum       = "quorum"
	ProtocolMeteorShower = "meteorshower"
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
	{
		Name: ProtocolMeteorShower,
		Doc: "quorum writes, sequentially consistent reads served by the local replica using periodic status " +
			"messages and bounded clock error (meteorshower-paper.txt II-III)",
		Options: []OptionSpec{
			{Name: "read_level", Default: string(LevelQuorum), Doc: "QUORUM or ALL: how many valid statuses a local read needs", Normalize: normalizeMSReadLevel},
			{Name: "write_level", Default: string(LevelQuorum), Doc: "ONE, QUORUM or ALL; also decides θ upper (paper II-E)", Normalize: normalizeMSWriteLevel},
			{Name: "theta", Default: "lower", Doc: "maximum staleness of a usable status: lower (0; sequentially consistent), upper (the paper's bound from the write level and the one-way delay lower bounds, minus ε; NOT sequentially consistent with concurrent writers in other regions, see docs/meteorshower.md), or a Go duration", Normalize: normalizeTheta},
			{Name: "status_interval", Default: "10ms", Doc: "how often each replica sends its status to every peer; 1ms..1s", Normalize: durationRange(time.Millisecond, time.Second)},
			{Name: "redundancy", Default: "3", Doc: "l: earlier statuses repeated in each status, so up to l consecutive lost statuses are tolerated; 0..16", Normalize: intRange(0, 16)},
			{Name: "speculative_retry", Default: "0s", Doc: "for fallback quorum reads: as in quorum", Normalize: normalizeNonNegativeDuration},
		},
	},
}

func normalizeMSReadLevel(v string) (string, error) {
	l, err := ParseLevel(v)
	if err != nil {
		return "", err
	}
	if l != LevelQuorum && l != LevelAll {
		return "", fmt.Errorf("meteorshower reads are QUORUM or ALL, not %s", l)
	}
	return string(l), nil
}

func normalizeMSWriteLevel(v string) (string, error) {
	l, err := ParseLevel(v)
	if err != nil {
		return "", err
	}
	if l != LevelOne && l != LevelQuorum && l != LevelAll {
		return "", fmt.Errorf("meteorshower writes are ONE, QUORUM or ALL, not %s", l)
	}
	return string(l), nil
}

func normalizeTheta(v string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "lower", "upper":
		return strings.ToLower(strings.TrimSpace(v)), nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < 0 {
		return "", fmt.Errorf("theta must be lower, upper or a Go duration ≥ 0, got %q", v)
	}
	return d.String(), nil
}

func durationRange(lo, hi time.Duration) func(string) (string, error) {
	return func(v string) (string, error) {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return "", fmt.Errorf("invalid duration %q", v)
		}
		if d < lo || d > hi {
			return "", fmt.Errorf("must be between %v and %v, got %v", lo, hi, d)
		}
		return d.String(), nil
	}
}

func intRange(lo, hi int) func(string) (string, error) {
	return func(v string) (string, error) {
		var n int
		if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d", &n); err != nil || fmt.Sprint(n) != strings.TrimSpace(v) {
			return "", fmt.Errorf("not an integer: %q", v)
		}
		if n < lo || n > hi {
			return "", fmt.Errorf("must be between %d and %d, got %d", lo, hi, n)
		}
		return fmt.Sprint(n), nil
	}
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
