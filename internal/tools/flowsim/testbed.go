// Package flowsim is a deterministic flow-level simulator of the Mayflower thesis's testbed
// (thesis-mayflower-canopus-kawkab 3.4.1): hosts in racks in pods, a three-tier network
// with oversubscribed upper tiers, files with three replicas placed across fault domains,
// Poisson read jobs on Zipf-popular files from clients placed by rack/pod/other locality, and
// the six replica-and-path selection schemes of 3.4.2 run on the same seeds. Bytes move at
// the network's max-min fair rates (mayflower.Model.FairRates), recomputed at every arrival
// and completion; the selectors see the network only as the thesis's Flowserver does
// (mayflower.Model kept from their own placements and polled counters).
package flowsim

import (
	"fmt"
	"math"
)

// Testbed is the simulated network: Pods pods of RacksPerPod racks of HostsPerRack hosts.
// Each rack's top-of-rack switch has one uplink to each of its pod's two aggregation
// switches, and each aggregation switch one uplink to each of the two core switches (the
// thesis's topology: "a pod consists of four racks connected to two common aggregation
// switches ... the pods are connected through two core switches").
type Testbed struct {
	Pods, RacksPerPod, HostsPerRack int
	// EdgeBps is a host link's capacity, bytes/s each way (the thesis: 1 Gbps).
	EdgeBps float64
	// RackOversubscription is the ratio of a rack's host capacity to its two uplinks'
	// (each carries HostsPerRack·EdgeBps / (2·RackOversubscription)), PodOversubscription
	// the ratio of what a pod's rack uplinks bring to its aggregation switches' core uplinks.
	// The network's oversubscription is their product. The thesis varies "the capacity of
	// higher tier links" (3.4.1, 3.4.6) and gives only the product (8:1 by default), not how
	// it is split between the tiers; DefaultTestbed splits 8 as 2 × 4.
	RackOversubscription, PodOversubscription float64
}

// DefaultTestbed is the thesis's: 64 hosts in 4 pods of 4 racks, 1 Gbps edges, 8:1
// oversubscription (2:1 at the racks, 4:1 at the pods).
func DefaultTestbed() Testbed {
	return Testbed{Pods: 4, RacksPerPod: 4, HostsPerRack: 4, EdgeBps: 1e9 / 8, RackOversubscription: 2, PodOversubscription: 4}
}

// Oversubscription is the network's: host capacity over core capacity.
func (t Testbed) Oversubscription() float64 { return t.RackOversubscription * t.PodOversubscription }

// Validate checks the shape.
func (t Testbed) Validate() error {
	switch {
	case t.Pods < 2 || t.Pods > 64, t.RacksPerPod < 2 || t.RacksPerPod > 64, t.HostsPerRack < 1 || t.HostsPerRack > 64:
		return fmt.Errorf("flowsim: testbed of %d pods × %d racks × %d hosts: want 2..64 pods, 2..64 racks per pod (three replicas in distinct racks and pods), 1..64 hosts per rack", t.Pods, t.RacksPerPod, t.HostsPerRack)
	case !(t.EdgeBps > 0) || math.IsInf(t.EdgeBps, 0):
		return fmt.Errorf("flowsim: edge capacity %v: want > 0", t.EdgeBps)
	case !(t.RackOversubscription >= 1) || t.RackOversubscription > 1000 || !(t.PodOversubscription >= 1) || t.PodOversubscription > 1000:
		return fmt.Errorf("flowsim: oversubscription %v at the racks, %v at the pods: want 1..1000 each", t.RackOversubscription, t.PodOversubscription)
	}
	return nil
}

// Hosts is the number of hosts.
func (t Testbed) Hosts() int { return t.Pods * t.RacksPerPod * t.HostsPerRack }

// Host is a host's place: pod, rack in the pod, index in the rack.
type Host struct{ Pod, Rack, Index int }

// Place returns host h's place.
func (t Testbed) Place(h int) Host {
	perPod := t.RacksPerPod * t.HostsPerRack
	return Host{Pod: h / perPod, Rack: h % perPod / t.HostsPerRack, Index: h % t.HostsPerRack}
}

// HostAt is the host at a place.
func (t Testbed) HostAt(p Host) int {
	return (p.Pod*t.RacksPerPod+p.Rack)*t.HostsPerRack + p.Index
}

// Link names (directed).
func upHost(h int) string               { return fmt.Sprintf("h%d>tor", h) }
func downHost(h int) string             { return fmt.Sprintf("tor>h%d", h) }
func torUp(pod, rack, agg int) string   { return fmt.Sprintf("tor%d.%d>agg%d.%d", pod, rack, pod, agg) }
func torDown(pod, rack, agg int) string { return fmt.Sprintf("agg%d.%d>tor%d.%d", pod, agg, pod, rack) }
func aggUp(pod, agg, core int) string   { return fmt.Sprintf("agg%d.%d>core%d", pod, agg, core) }
func aggDown(pod, agg, core int) string { return fmt.Sprintf("core%d>agg%d.%d", core, pod, agg) }
func (t Testbed) torUplinkBps() float64 {
	return float64(t.HostsPerRack) * t.EdgeBps / (2 * t.RackOversubscription)
}
func (t Testbed) aggUplinkBps() float64 {
	return float64(t.RacksPerPod) * t.torUplinkBps() / (2 * t.PodOversubscription)
}

// Links returns every directed link with its capacity.
func (t Testbed) Links() map[string]float64 {
	out := map[string]float64{}
	for h := range t.Hosts() {
		out[upHost(h)], out[downHost(h)] = t.EdgeBps, t.EdgeBps
	}
	for p := range t.Pods {
		for a := range 2 {
			for r := range t.RacksPerPod {
				out[torUp(p, r, a)], out[torDown(p, r, a)] = t.torUplinkBps(), t.torUplinkBps()
			}
			for c := range 2 {
				out[aggUp(p, a, c)], out[aggDown(p, a, c)] = t.aggUplinkBps(), t.aggUplinkBps()
			}
		}
	}
	return out
}

// Paths returns every shortest path from host src to host dst, each a list of directed
// links, in a fixed order: 1 within a rack, 2 within a pod (one per aggregation switch), 8
// across pods (source aggregation, core, destination aggregation).
func (t Testbed) Paths(src, dst int) [][]string {
	a, b := t.Place(src), t.Place(dst)
	switch {
	case src == dst:
		return nil
	case a.Pod == b.Pod && a.Rack == b.Rack:
		return [][]string{{upHost(src), downHost(dst)}}
	case a.Pod == b.Pod:
		var out [][]string
		for g := range 2 {
			out = append(out, []string{upHost(src), torUp(a.Pod, a.Rack, g), torDown(b.Pod, b.Rack, g), downHost(dst)})
		}
		return out
	}
	var out [][]string
	for g := range 2 {
		for c := range 2 {
			for g2 := range 2 {
				out = append(out, []string{upHost(src), torUp(a.Pod, a.Rack, g), aggUp(a.Pod, g, c), aggDown(b.Pod, g2, c), torDown(b.Pod, b.Rack, g2), downHost(dst)})
			}
		}
	}
	return out
}

// Distance is 0 for the same host, 1 for the same rack, 2 for the same pod, 3 otherwise
// (what "nearest" ranks replicas by).
func (t Testbed) Distance(x, y int) int {
	a, b := t.Place(x), t.Place(y)
	switch {
	case x == y:
		return 0
	case a.Pod == b.Pod && a.Rack == b.Rack:
		return 1
	case a.Pod == b.Pod:
		return 2
	}
	return 3
}
