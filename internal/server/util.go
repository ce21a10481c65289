package server

import (
	"slices"
	"time"

	"meridian/internal/config"
	"meridian/internal/hlc"
	"meridian/internal/placement"
)

func sortedNames(m map[string]*placement.Keyspace) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func nodeNames(c *config.Cluster) []string {
	out := make([]string, 0, len(c.Nodes))
	for _, n := range c.Nodes {
		out = append(out, n.Name)
	}
	return out
}

func newOffsetClock(offset time.Duration) hlc.PhysicalClock { return hlc.NewSystemClock(offset) }
