package config

import (
	"fmt"
	"strings"
)

// Level is a consistency level of the quorum protocol (and of the protocols that reuse its
// write path). The values behave like Cassandra's levels of the same name.
type Level string

// The consistency levels.
const (
	LevelOne         Level = "ONE"          // one replica anywhere
	LevelQuorum      Level = "QUORUM"       // a majority of all replicas
	LevelAll         Level = "ALL"          // every replica
	LevelLocalOne    Level = "LOCAL_ONE"    // one replica in the coordinator's region
	LevelLocalQuorum Level = "LOCAL_QUORUM" // a majority of the replicas in the coordinator's region
)

var levels = []Level{LevelOne, LevelQuorum, LevelAll, LevelLocalOne, LevelLocalQuorum}

// Levels returns every consistency level.
func Levels() []Level { return append([]Level(nil), levels...) }

// ParseLevel parses a level name, case-insensitively ("local_quorum" is LevelLocalQuorum).
// The error lists the valid levels.
func ParseLevel(s string) (Level, error) {
	u := Level(strings.ToUpper(strings.TrimSpace(s)))
	for _, l := range levels {
		if u == l {
			return l, nil
		}
	}
	names := make([]string, len(levels))
	for i, l := range levels {
		names[i] = string(l)
	}
	return "", fmt.Errorf("unknown consistency level %q (valid: %s)", s, strings.Join(names, ", "))
}

// IsLocal reports whether the level counts only replicas in the coordinator's region.
func (l Level) IsLocal() bool { return l == LevelLocalOne || l == LevelLocalQuorum }

func (l Level) String() string { return string(l) }
