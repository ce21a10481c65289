package coord

import (
	"slices"
	"testing"
	"time"

	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/placement"
	"meridian/internal/topology"
	"meridian/internal/wire/peerpb"
)

// A new replica in a mayflower keyspace pulls its snapshot (and a scan its pages) from the old
// replica of least cost: the one next door while its uplink is free, a replica across the WAN once the
// neighbour's uplink is taken by other transfers, and the move's named source otherwise.
func TestMoveSourceByCost(t *testing.T) {
	topo := topology.Equidistant("t", []string{"a", "b"}, 100, 0.5)
	nodes := []config.Node{{ID: 1, Name: "n1", Region: "a"}, {ID: 2, Name: "n2", Region: "a"}, {ID: 3, Name: "n3", Region: "b"}, {ID: 4, Name: "n4", Region: "a"}}
	net := config.Network{NodeBytesPerSec: 10e6, WANBytesPerSec: 5e6, ReportInterval: time.Second}
	core := func(selector string) *Core {
		c := New(Config{Config: engine.Config{NodeID: 4, Nodes: nodes, Topology: topo, Network: net}, Protocol: config.ProtocolQuorum}, nil, nil)
		c.Pmap = &placement.Map{Keyspaces: map[string]*placement.Keyspace{"ks": {Spec: config.Keyspace{Name: "ks", Protocol: config.ProtocolQuorum,
			Options: map[string]string{"read_selector": selector}}}}}
		return c
	}
	now := time.Unix(1000, 0)
	in := &inMove{span: span("", ""), source: 3, named: 3, old: []uint32{2, 3}}
	c := core("mayflower")
	if got := c.moveSource(now, in); got != 2 {
		t.Fatalf("idle network: source n%d, want n2 (same region)", got)
	}
	// n1 reports three transfers from n2 at 3 MB/s each: n2's uplink is nearly full.
	var busy []*peerpb.Transfer
	for range 3 {
		busy = append(busy, &peerpb.Transfer{Source: 2, RemainingBytes: 100e6, RemainingKnown: true, RateBytesPerSec: 3e6})
	}
	ks, _ := c.Pmap.Keyspace("ks")
	if got := c.transferOrder(now, ks, []uint32{4, 2, 3}, 4<<20); !slices.Equal(got, []uint32{4, 2, 3}) {
		t.Fatalf("idle network: scan order %v, want this node, then n2, then n3", got)
	}
	c.handleTransferReport(now, 1, &peerpb.TransferReport{Transfers: busy, IntervalMs: 1000})
	if got := c.moveSource(now, in); got != 3 {
		t.Fatalf("n2's uplink busy: source n%d, want n3 (across the WAN, idle)", got)
	}
	if got := c.transferOrder(now, ks, []uint32{4, 2, 3}, 4<<20); !slices.Equal(got, []uint32{4, 3, 2}) {
		t.Fatalf("n2's uplink busy: scan order %v, want this node, then n3, then n2", got)
	}
	// A report older than three intervals is forgotten.
	if got := c.moveSource(now.Add(4*time.Second), in); got != 2 {
		t.Fatalf("stale report: source n%d, want n2", got)
	}
	if got := core("nearest").moveSource(now, in); got != 3 {
		t.Fatalf("nearest keyspace: source n%d, want the named n3", got)
	}
}
