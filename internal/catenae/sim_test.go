package catenae

import (
	"container/heap"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"meridian/internal/tools/check"
)

// A small deterministic simulation of Catenae: three data centers apart by WAN delays, with
// loosely synchronized clocks, lost, duplicated and reordered messages, pauses, and replicas
// that execute wrongly now and then (validation must outvote them). Closed-loop clients at
// each data center run list-append transactions; every history must be serializable.

type simEvent struct {
	at  time.Duration
	seq int
	fn  func()
}

type simQueue []*simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(*simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simOpts struct {
	seed     uint64
	mutation string
	loss     float64
	corrupt  float64
	pauses   bool
	dur      time.Duration
	// corruptTwo: data centers 2 and 3 both execute wrongly now and then (a three-way split
	// of digests: the tie-break decides).
	corruptTwo bool
}

type simResult struct {
	hist                check.TxnHistory
	committed, timedOut int
	fast, slow          int
	latencies           []time.Duration
	stats               []Stats
}

var simDCs = []uint32{1, 2, 3}

// oneWay delays between data centers (ec2-sdur-3-like: 45, 50, 85 ms).
func simOneWay(a, b uint32) time.Duration {
	if a == b {
		return 0
	}
	if a > b {
		a, b = b, a
	}
	switch {
	case a == 1 && b == 2:
		return 45 * time.Millisecond
	case a == 2 && b == 3:
		return 50 * time.Millisecond
	}
	return 85 * time.Millisecond
}

func runSim(t testing.TB, o simOpts) simResult {
	rng := rand.New(rand.NewPCG(o.seed, 99))
	var q simQueue
	seq := 0
	now := time.Duration(0)
	epoch0 := time.Unix(1_800_000_000, 0)
	at := func(d time.Duration, fn func()) {
		seq++
		heap.Push(&q, &simEvent{at: now + d, seq: seq, fn: fn})
	}
	offsets := map[uint32]time.Duration{}
	reps := map[uint32]*Replica{}
	paused := map[uint32]bool{}
	for _, dc := range simDCs {
		offsets[dc] = time.Duration(rng.IntN(2000)-1000) * time.Microsecond // ±1 ms
		dc := dc
		opts := Options{EpochLength: 10 * time.Millisecond, Mutation: o.mutation, Start: uint64(epoch0.UnixNano()/int64(10*time.Millisecond)) - 1}
		if o.corrupt > 0 && (dc == 3 || (o.corruptTwo && dc == 2)) {
			opts.Corrupt = func(TxnID) bool { return rng.Float64() < o.corrupt }
		}
		r, err := NewReplica(dc, simDCs, opts)
		if err != nil {
			t.Fatal(err)
		}
		reps[dc] = r
	}
	clock := func(dc uint32) time.Time { return epoch0.Add(now + offsets[dc]) }
	var res simResult
	type pendingTxn struct {
		rec    *check.Txn
		start  time.Duration
		client int
	}
	pending := map[TxnID]*pendingTxn{}
	var startClient func(dc uint32, c int)
	var drain func(dc uint32)
	drain = func(dc uint32) {
		r := reps[dc]
		for r.HasReady() {
			rd := r.Ready()
			for _, m := range rd.Messages {
				m := m
				if rng.Float64() < o.loss {
					continue
				}
				copies := 1
				if rng.Float64() < o.loss/2 {
					copies = 2
				}
				for range copies {
					d := simOneWay(dc, m.To) + time.Duration(rng.IntN(5000))*time.Microsecond
					at(d, func() {
						if paused[m.To] {
							return
						}
						reps[m.To].Step(clock(m.To), m)
						drain(m.To)
					})
				}
			}
			for _, out := range rd.Outcomes {
				p := pending[out.Txn]
				if p == nil {
					continue
				}
				delete(pending, out.Txn)
				p.rec.Return = int64(now)
				if out.Committed {
					p.rec.Outcome = check.TxnOK
					ri := 0
					for i := range p.rec.Ops {
						if p.rec.Ops[i].Kind == check.MopRead {
							p.rec.Ops[i].List = decodeList(out.Result.Reads[ri])
							ri++
						}
					}
					res.committed++
					res.latencies = append(res.latencies, now-p.start)
					if out.Fast {
						res.fast++
					} else {
						res.slow++
					}
				} else {
					p.rec.Outcome = check.TxnAborted
				}
				res.hist.Txns = append(res.hist.Txns, *p.rec)
				c := p.client
				at(time.Millisecond, func() { startClient(dc, c) })
			}
		}
	}
	keys := []string{"a", "b", "c", "d", "e", "f"}
	nextVal := int64(0)
	nextID := 0
	startClient = func(dc uint32, c int) {
		if now >= o.dur {
			return
		}
		nextID++
		rec := &check.Txn{ID: nextID, Process: int(dc)*100 + c, Invoke: int64(now)}
		var proc Proc
		perm := rng.Perm(len(keys))
		for _, i := range perm[:1+rng.IntN(2)] {
			proc.Ops = append(proc.Ops, Op{Kind: OpRead, Key: keys[i]})
			rec.Ops = append(rec.Ops, check.Mop{Kind: check.MopRead, Key: keys[i]})
		}
		for _, i := range perm[1 : 2+rng.IntN(2)] {
			nextVal++
			proc.Ops = append(proc.Ops, Op{Kind: OpAppend, Key: keys[i], Delta: nextVal})
			rec.Ops = append(rec.Ops, check.Mop{Kind: check.MopAppend, Key: keys[i], Value: nextVal})
		}
		if paused[dc] {
			at(50*time.Millisecond, func() { startClient(dc, c) })
			return
		}
		id, err := reps[dc].Submit(clock(dc), proc)
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		p := &pendingTxn{rec: rec, start: now, client: c}
		pending[id] = p
		at(5*time.Second, func() {
			if pending[id] == p {
				delete(pending, id)
				rec.Outcome = check.TxnIndeterminate
				res.hist.Txns = append(res.hist.Txns, *rec)
				res.timedOut++
				startClient(dc, c)
			}
		})
		drain(dc)
	}
	var tick func(dc uint32)
	tick = func(dc uint32) {
		if !paused[dc] {
			reps[dc].Tick(clock(dc))
			drain(dc)
		}
		if now < o.dur+10*time.Second {
			at(time.Millisecond, func() { tick(dc) })
		}
	}
	for _, dc := range simDCs {
		dc := dc
		at(0, func() { tick(dc) })
		for c := range 3 {
			c := c
			at(time.Duration(rng.IntN(10))*time.Millisecond, func() { startClient(dc, c) })
		}
	}
	if o.pauses {
		for i := 0; i < 3; i++ {
			dc := simDCs[rng.IntN(len(simDCs))]
			start := time.Duration(rng.IntN(int(o.dur/time.Millisecond))) * time.Millisecond
			at(start, func() { paused[dc] = true })
			at(start+time.Duration(100+rng.IntN(400))*time.Millisecond, func() { paused[dc] = false })
		}
	}
	for q.Len() > 0 {
		e := heap.Pop(&q).(*simEvent)
		now = e.at
		e.fn()
		if len(pending) == 0 && now > o.dur+time.Second {
			break
		}
	}
	for _, p := range pending {
		p.rec.Outcome = check.TxnIndeterminate
		res.hist.Txns = append(res.hist.Txns, *p.rec)
	}
	for _, dc := range simDCs {
		res.stats = append(res.stats, reps[dc].Stats())
	}
	return res
}

func decodeList(b []byte) []int64 {
	var out []int64
	for len(b) >= 8 {
		out = append(out, int64(binary.BigEndian.Uint64(b[:8])))
		b = b[8:]
	}
	return out
}

func checkSim(res simResult) error {
	r, anomalies := check.CheckSerializable(res.hist, time.Minute)
	if r != check.Ok {
		msg := fmt.Sprintf("not serializable (%d transactions, %d committed)", len(res.hist.Txns), res.committed)
		for i, a := range anomalies {
			if i == 3 {
				break
			}
			msg += "\n  " + a.String()
		}
		return fmt.Errorf("%s", msg)
	}
	return nil
}

func TestSimSerializable(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	for seed := range seeds {
		o := simOpts{seed: uint64(seed), loss: 0.02, corrupt: 0.02, corruptTwo: seed%3 == 0, pauses: seed%2 == 0, dur: 2 * time.Second}
		res := runSim(t, o)
		if err := checkSim(res); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if res.committed < 50 {
			t.Fatalf("seed %d: only %d committed (%d timed out)", seed, res.committed, res.timedOut)
		}
	}
}

func TestSimMutationsCaught(t *testing.T) {
	for m := range Mutations {
		t.Run(m, func(t *testing.T) {
			for seed := range 30 {
				o := simOpts{seed: uint64(seed), mutation: m, loss: 0.02, corrupt: 0.2, corruptTwo: true, pauses: true, dur: time.Second}
				if err := checkSim(runSim(t, o)); err != nil {
					t.Logf("caught at seed %d: %v", seed, err)
					return
				}
			}
			t.Errorf("mutation %s not caught in 30 seeds", m)
		})
	}
}

func TestSimReport(t *testing.T) {
	res := runSim(t, simOpts{seed: 1, dur: 3 * time.Second})
	var sum time.Duration
	for _, l := range res.latencies {
		sum += l
	}
	slicesSort(res.latencies)
	p := func(q float64) time.Duration { return res.latencies[int(q*float64(len(res.latencies)-1))] }
	t.Logf("committed %d (fast %d, slow %d), timed out %d; latency p50 %v p99 %v mean %v; stats %+v",
		res.committed, res.fast, res.slow, res.timedOut, p(0.5), p(0.99), sum/time.Duration(len(res.latencies)), res.stats)
	if err := checkSim(res); err != nil {
		t.Fatal(err)
	}
}

func slicesSort(d []time.Duration) {
	for i := 1; i < len(d); i++ {
		for j := i; j > 0 && d[j] < d[j-1]; j-- {
			d[j], d[j-1] = d[j-1], d[j]
		}
	}
}
