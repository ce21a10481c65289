package catsim

import (
	"meridian/internal/catenae"
	"meridian/internal/tools/check"
	"meridian/internal/tools/tpcc"
)

// tpccWorkload runs internal/tools/tpcc's transactions as procedures: reads, adds (a
// read-modify-write of an integer), inserts.
type tpccWorkload struct{ gen *tpcc.Gen }

func newTPCC(o Options, regions int) *tpccWorkload {
	per := o.Warehouses
	if per <= 0 {
		per = 2
	}
	return &tpccWorkload{gen: &tpcc.Gen{Regions: regions, PerRegion: per}}
}

func (w *tpccWorkload) next(s *sim, dc uint32, client int) (catenae.Proc, *check.Txn) {
	t := w.gen.Next(int(dc-1), client, s.rng.IntN)
	var p catenae.Proc
	for _, k := range t.Reads {
		p.Ops = append(p.Ops, catenae.Op{Kind: catenae.OpRead, Key: k})
	}
	for _, a := range t.Adds {
		p.Ops = append(p.Ops, catenae.Op{Kind: catenae.OpAdd, Key: a.Key, Delta: a.Delta})
	}
	for _, k := range t.Inserts {
		p.Ops = append(p.Ops, catenae.Op{Kind: catenae.OpWrite, Key: k, Value: []byte("row")})
	}
	return p, nil
}
