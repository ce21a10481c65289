package server_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"meridian/api/meridianpb"
	"meridian/internal/kawkab"
)

// counterValue is the value of a counter series (summed over its labels) in a registry.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if c := m.GetCounter(); c != nil {
				sum += c.GetValue()
			}
			if g := m.GetGauge(); g != nil {
				sum += g.GetValue()
			}
		}
	}
	return sum
}

// TestStreamsHistoricalReads: with the nodes sharing an object store, the primary uploads
// each full 4 MiB chunk; a historical read at another node is served from the object store
// alone — the same records the primary reads, only the uploaded ones, the uploaded count in
// every page — and the primary serves nothing for it (thesis 5.7.4, Fig. 5.12). A
// non-historical read there is refused naming the primary; a historical read before any
// upload, or past the uploaded records, is refused too.
func TestStreamsHistoricalReads(t *testing.T) {
	c := startCluster(t)
	shared := kawkab.NewMemObjectStore()
	var nodes []*streamNode
	for i := range c.Nodes {
		nodes = append(nodes, startStreamNode(t, c, i, t.TempDir(), shared))
	}
	cx := ctx(t)
	const R = 16
	info := createStream(t, nodes[0].api, "h", R)
	prim := byName(t, nodes, info.Primary)
	if info.Reader == "" || info.Reader == info.Primary {
		t.Fatalf("stream's reader %q (primary %q)", info.Reader, info.Primary)
	}
	reader := byName(t, nodes, info.Reader)

	// Before any upload: refused, naming the primary.
	_, err := reader.api.Aggregate(cx, &meridianpb.AggregateRequest{Keyspace: "kv", Stream: "h", FromTimestamp: 0, ToTimestamp: 1 << 60, Historical: true})
	wantCode(t, err, codes.FailedPrecondition, "no chunk of it is in the object store yet", info.PrimaryAddress)

	// 2.5 chunks of 16-byte records (262,144 per chunk), timestamps 0, 2, 4, …
	perChunk := kawkab.ChunkBytes / R
	total := perChunk*5/2 + 7
	all := recs(R, total, 0, 2, func(i int) int64 { return int64(i % 1000) })
	var batches [][]byte
	for off := 0; off < len(all); off += 4000 * R {
		batches = append(batches, all[off:min(off+4000*R, len(all))])
	}
	if _, err := appendAll(t, prim.api, "kv", "h", batches...); err != nil {
		t.Fatal(err)
	}

	// Wait (bounded) until the reader sees both full chunks uploaded.
	wantUp := uint64(2 * perChunk)
	deadline := time.Now().Add(60 * time.Second)
	var agg *meridianpb.AggregateResponse
	for {
		agg, err = reader.api.Aggregate(cx, &meridianpb.AggregateRequest{Keyspace: "kv", Stream: "h", FromTimestamp: 0, ToTimestamp: 1 << 60, Historical: true})
		if err == nil && agg.UploadedRecords == wantUp {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reader does not see %d uploaded records: %v, %v", wantUp, agg, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The historical aggregate covers the uploaded records only.
	var wantSum int64
	for i := range int(wantUp) {
		wantSum += int64(i % 1000)
	}
	if agg.Count != wantUp || agg.Sum != fmt.Sprint(wantSum) || agg.Min != 0 || agg.Max != 999 {
		t.Fatalf("historical aggregate %+v, want count %d sum %d", agg, wantUp, wantSum)
	}

	// Non-historical reads at the reader are refused, naming the primary.
	st, err := reader.api.ReadRecords(cx, &meridianpb.ReadRecordsRequest{Keyspace: "kv", Stream: "h", First: 0, Count: 10})
	if err == nil {
		_, _, _, err = readAll(t, st.Recv)
	}
	wantCode(t, err, codes.FailedPrecondition, "not its primary", info.PrimaryAddress)

	primReads := counterValue(t, streamRegistry(nodeNamed(t, c, info.Primary)), "meridian_stream_read_records_total")

	// Historical range reads at the reader equal the primary's records: one inside the
	// uploaded records across the chunk boundary, one that runs past them (cut at them).
	for _, rg := range []struct{ from, to int64 }{
		{int64(perChunk-500) * 2, int64(perChunk+500) * 2},
		{int64(2*perChunk-100) * 2, int64(2*perChunk+100) * 2},
		{int64(3 * perChunk * 2), int64(4 * perChunk * 2)}, // nothing uploaded there
	} {
		st, err := reader.api.ReadRange(cx, &meridianpb.ReadRangeRequest{Keyspace: "kv", Stream: "h", FromTimestamp: rg.from, ToTimestamp: rg.to, Historical: true})
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		pages := 0
		for {
			p, err := st.Recv()
			if err != nil {
				break
			}
			pages++
			if p.UploadedRecords != wantUp {
				t.Fatalf("page with uploaded_records %d, want %d", p.UploadedRecords, wantUp)
			}
			got = append(got, p.Records...)
		}
		if pages == 0 {
			t.Fatalf("historical range [%d, %d]: no page (not even one with the uploaded count)", rg.from, rg.to)
		}
		lo, hi := rg.from/2, min(rg.to/2, int64(wantUp)-1)
		var want []byte
		if lo <= hi {
			want = all[lo*R : (hi+1)*R]
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("historical range [%d, %d]: %d bytes, want %d", rg.from, rg.to, len(got), len(want))
		}
	}
	// By record number: the uploaded ones, then a refusal past them.
	st, err = reader.api.ReadRecords(cx, &meridianpb.ReadRecordsRequest{Keyspace: "kv", Stream: "h", First: wantUp - 3, Count: 0, Historical: true})
	if err != nil {
		t.Fatal(err)
	}
	first, got, _, err := readAll(t, st.Recv)
	if err != nil || first != wantUp-3 || !bytes.Equal(got, all[(wantUp-3)*R:wantUp*R]) {
		t.Fatalf("historical records from %d: first %d, %d bytes, %v", wantUp-3, first, len(got), err)
	}
	st, err = reader.api.ReadRecords(cx, &meridianpb.ReadRecordsRequest{Keyspace: "kv", Stream: "h", First: wantUp, Count: 5, Historical: true})
	if err == nil {
		_, _, _, err = readAll(t, st.Recv)
	}
	wantCode(t, err, codes.FailedPrecondition, "the object store holds records 0 to", info.PrimaryAddress)

	// The primary served none of it (Fig. 5.12: it sends 0 bytes for historical reads).
	if after := counterValue(t, streamRegistry(nodeNamed(t, c, info.Primary)), "meridian_stream_read_records_total"); after != primReads {
		t.Fatalf("the primary's read records went from %v to %v during historical reads at another node", primReads, after)
	}
	if n := counterValue(t, streamRegistry(nodeNamed(t, c, info.Reader)), "meridian_stream_historical_reads_total"); n < 5 {
		t.Fatalf("the reader counted %v historical reads", n)
	}
	// The primary's store exports its uploads.
	if n := counterValue(t, streamRegistry(nodeNamed(t, c, info.Primary)), "meridian_stream_store_uploads_total"); n != 2 {
		t.Fatalf("the primary's store counts %v uploads, want 2", n)
	}

	// A historical read at the primary is served by the primary, from its own files: all
	// records, uploaded or not.
	st, err = prim.api.ReadRecords(cx, &meridianpb.ReadRecordsRequest{Keyspace: "kv", Stream: "h", First: uint64(total - 2), Historical: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, got, _, err := readAll(t, st.Recv); err != nil || !bytes.Equal(got, all[(total-2)*R:]) {
		t.Fatalf("historical read at the primary: %d bytes, %v", len(got), err)
	}
}
