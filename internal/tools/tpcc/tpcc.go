// Package tpcc is a TPC-C-like workload usable by every transaction mode (TPC-C 5.2: New-Order
// and Payment, the two transactions that write and make up 88% of TPC-C's mix; here half
// each). Warehouses are spread over regions (PerRegion each); a client runs against a
// warehouse of its own region. As in TPC-C, 1% of a New-Order's order lines are supplied by a
// remote warehouse and 15% of the Payments pay a customer of a remote warehouse. Scaled down:
// 10 districts per warehouse, 300 customers per district, 10,000 items. Keys are known before
// execution (Catenae's chainable transactions): a new order's lines go to keys named by the
// client and its sequence, not by the order number the district hands out.
package tpcc

import (
	"fmt"
	"strconv"
	"strings"
)

const (
	tpccDistricts = 10
	tpccCustomers = 300
	tpccItems     = 10_000
)

// Txn is one TPC-C-like transaction as abstract reads and read-modify-writes, so that
// every transaction mode can run it (catenae as a procedure; sdur and 2pc as reads, then
// writes computed by the client).
type Txn struct {
	Kind string // "new-order" or "payment"
	// Reads are read only; Adds are read and written (the value plus the delta, integers);
	// Inserts are written blind (new rows).
	Reads   []string
	Adds    []Add
	Inserts []string
	// Remote: the transaction touches a warehouse of another region.
	Remote bool
}

// Add is a read-modify-write of an integer.
type Add struct {
	Key   string
	Delta int64
}

// Gen draws TPC-C-like transactions.
type Gen struct {
	Regions, PerRegion int
	seq                int64
}

// Next draws the next transaction of client (an ID unique among the clients) in the region of
// index region, with intn as its source of uniform integers in [0, n).
func (g *Gen) Next(region, client int, intn func(int) int) Txn {
	g.seq++
	w := region*g.PerRegion + intn(g.PerRegion)
	remoteW := func() int {
		if g.Regions < 2 {
			return w
		}
		// A warehouse of another region: draw among the others', skipping this region's.
		o := intn((g.Regions - 1) * g.PerRegion)
		if o >= region*g.PerRegion {
			o += g.PerRegion
		}
		return o
	}
	d := intn(tpccDistricts)
	if intn(2) == 0 {
		t := Txn{Kind: "new-order"}
		c := intn(tpccCustomers)
		t.Reads = append(t.Reads, fmt.Sprintf("w%d/tax", w), fmt.Sprintf("c%d/%d/%d/discount", w, d, c))
		t.Adds = append(t.Adds, Add{Key: fmt.Sprintf("d%d/%d/next_o_id", w, d), Delta: 1})
		lines := 5 + intn(11)
		seen := map[int]bool{}
		for l := 0; l < lines; l++ {
			item := intn(tpccItems)
			if seen[item] {
				continue
			}
			seen[item] = true
			sw := w
			if intn(100) == 0 {
				sw, t.Remote = remoteW(), true
			}
			qty := int64(1 + intn(10))
			t.Reads = append(t.Reads, fmt.Sprintf("i%d/price", item))
			t.Adds = append(t.Adds, Add{Key: fmt.Sprintf("s%d/%d/quantity", sw, item), Delta: -qty})
			t.Inserts = append(t.Inserts, fmt.Sprintf("ol%d/%d/%d-%d/%d", w, d, client, g.seq, l))
		}
		return t
	}
	t := Txn{Kind: "payment"}
	h := int64(1 + intn(5000))
	cw := w
	if intn(100) < 15 {
		cw, t.Remote = remoteW(), true
	}
	t.Adds = append(t.Adds,
		Add{Key: fmt.Sprintf("w%d/ytd", w), Delta: h},
		Add{Key: fmt.Sprintf("d%d/%d/ytd", w, d), Delta: h},
		Add{Key: fmt.Sprintf("c%d/%d/%d/balance", cw, intn(tpccDistricts), intn(tpccCustomers)), Delta: -h})
	t.Inserts = append(t.Inserts, fmt.Sprintf("h%d/%d-%d", w, client, g.seq))
	return t
}

// Warehouse returns the warehouse a key belongs to (-1: the item table, read-only and
// replicated with every warehouse).
func Warehouse(key string) int {
	if strings.HasPrefix(key, "i") {
		return -1
	}
	i := 0
	for i < len(key) && (key[i] < '0' || key[i] > '9') {
		i++
	}
	j := i
	for j < len(key) && key[j] >= '0' && key[j] <= '9' {
		j++
	}
	w, err := strconv.Atoi(key[i:j])
	if err != nil {
		return -1
	}
	return w
}
