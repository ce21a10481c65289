package node

import (
	"log/slog"
	"testing"

	"meridian/internal/config"
	"meridian/internal/elascass"
	"meridian/internal/wire/peerpb"
)

// The driver's interference marking: a node whose requests take twice its peers' and whose host
// steals more than theirs is flagged within two rounds; the same slow node is not flagged when
// every node shares the steal (one busy host), nor when the nodes have no host of their own.
func TestMarkInterference(t *testing.T) {
	off := false
	run := func(steal func(id uint32) float64, measured bool) float64 {
		n := &Node{log: slog.New(slog.DiscardHandler), opts: Options{Cluster: &config.Cluster{}}}
		if off {
			n.opts.Cluster.Elasticity.Interference = new(bool) // interference: false
		}
		n.el.peers = map[uint32]peerStats{}
		members := []elascass.Member{}
		for id := uint32(1); id <= 3; id++ {
			members = append(members, elascass.Member{ID: id, Name: string(rune('a' + id)), Region: "eu", State: elascass.StateActive, Alive: true})
		}
		var index float64
		for round := range 4 {
			for id := uint32(1); id <= 3; id++ {
				svc := 1000.0 + float64(round%2)*10
				if id == 3 {
					svc *= 2
				}
				n.el.peers[id] = peerStats{msg: &peerpb.NodeStats{LoadOps: 100, ServiceUs: svc, HostMeasured: measured, StealShare: steal(id)}}
			}
			for i := range members {
				members[i].Interference = 0
			}
			n.markInterference(members)
			index = members[2].Interference
			for _, m := range members[:2] {
				if m.Interference != 0 {
					t.Fatalf("round %d: healthy node %d flagged (%v)", round, m.ID, m.Interference)
				}
			}
		}
		return index
	}
	if got := run(func(id uint32) float64 { return map[bool]float64{true: 0.3, false: 0.01}[id == 3] }, true); got < 1.3 {
		t.Fatalf("slow node with its own stealing host: index %v, want flagged", got)
	}
	if got := run(func(uint32) float64 { return 0.3 }, true); got != 0 {
		t.Fatalf("slow node on a host every node shares: flagged (%v)", got)
	}
	if got := run(func(id uint32) float64 { return map[bool]float64{true: 0.3, false: 0.01}[id == 3] }, false); got != 0 {
		t.Fatalf("nodes without a host of their own: flagged (%v)", got)
	}
	off = true
	if got := run(func(id uint32) float64 { return map[bool]float64{true: 0.3, false: 0.01}[id == 3] }, true); got != 0 {
		t.Fatalf("elasticity.interference off: flagged (%v)", got)
	}
}
