package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"meridian/api/meridianpb"
	"meridian/client"
	"meridian/internal/kawkab"
)

// TestStreams runs three real server processes on 127.0.0.x: a stream is created through one
// node, appended to from a client connected to a non-primary node (the client finds the
// primary), read by time range, by record number and aggregated at the primary and refused
// by a non-primary (FAILED_PRECONDITION naming the primary's address), tailed by a
// subscriber and by the CLI; then its primary is SIGKILLed during ingest, restarted, and every
// acknowledged record is read back where its acknowledgement said.
func TestStreams(t *testing.T) {
	skipShort(t)
	c := newCluster(t, threeNodes, nil)
	c.startAll()
	c.waitReady(c.names()...)
	cx, cancel := reqCtx()
	defer cancel()

	const R = 16
	info, err := c.client("n1").CreateStream(cx, &client.StreamSpec{Keyspace: "demo", Name: "ticks", RecordBytes: R, ValueOffset: 8})
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
	primary := c.node(info.Primary)
	if info.PrimaryAddress != primary.listen {
		t.Fatalf("primary %s at %s, want its listen address %s", info.Primary, info.PrimaryAddress, primary.listen)
	}
	var other *proc
	for _, p := range c.nodes {
		if p != primary {
			other = p
			break
		}
	}
	t.Logf("stream ticks: id %d, primary %s, reader %s", info.Id, info.Primary, info.Reader)

	// A subscriber from the start, through the non-primary's client.
	subCtx, subCancel := context.WithCancel(context.Background())
	defer subCancel()
	var subMu sync.Mutex
	var subRecs []byte
	subDone := make(chan error, 1)
	sub := c.client(other.name).Subscribe(subCtx, "demo", "ticks", client.SubscribeOptions{})
	go func() {
		for sub.Next() {
			r := sub.Record()
			subMu.Lock()
			if want := uint64(len(subRecs) / R); r.Number != want {
				subMu.Unlock()
				subDone <- fmt.Errorf("subscriber got record %d, want %d", r.Number, want)
				return
			}
			subRecs = append(subRecs, r.Bytes...)
			subMu.Unlock()
		}
		subDone <- sub.Err()
	}()

	// Appends through a client of a non-primary node: batches of 100.
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	mk := func(from, n int) []byte {
		b := client.NewBatch(R, 8)
		for i := from; i < from+n; i++ {
			b.Add(base+int64(i)*1000, int64(i%97)-40)
		}
		return bytes.Clone(b.Bytes())
	}
	app, err := c.client(other.name).NewAppender(cx, "demo", "ticks")
	if err != nil {
		t.Fatalf("appender: %v", err)
	}
	var model []byte
	for b := 0; b < 50; b++ {
		batch := mk(b*100, 100)
		first, err := app.Append(cx, batch)
		if err != nil {
			t.Fatalf("append batch %d: %v", b, err)
		}
		if first != uint64(b*100) {
			t.Fatalf("batch %d acknowledged at record %d", b, first)
		}
		model = append(model, batch...)
	}
	// An out-of-order batch is refused, naming both timestamps.
	if _, err := app.Append(cx, mk(10, 1)); client.CodeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), fmt.Sprint(base+10*1000)) {
		t.Fatalf("out-of-order append: %v", err)
	}
	app.Close()
	n := len(model) / R

	// Reads at the primary, through the client (routed).
	cl := c.client(other.name)
	readAll := func(it *client.Records) ([]byte, uint64) {
		t.Helper()
		var out []byte
		first := uint64(math.MaxUint64)
		for it.Next() {
			if first == math.MaxUint64 {
				first = it.Record().Number
			}
			out = append(out, it.Record().Bytes...)
		}
		if err := it.Err(); err != nil {
			t.Fatalf("read: %v", err)
		}
		return out, first
	}
	if got, _ := readAll(cl.ReadRecords(cx, "demo", "ticks", 0, 0)); !bytes.Equal(got, model) {
		t.Fatalf("read records: %d bytes, want %d", len(got), len(model))
	}
	got, first := readAll(cl.ReadRange(cx, "demo", "ticks", base+1234*1000-1, base+3210*1000))
	if first != 1234 || !bytes.Equal(got, model[1234*R:3211*R]) {
		t.Fatalf("read range: first %d, %d records", first, len(got)/R)
	}
	agg, err := cl.Aggregate(cx, "demo", "ticks", base, base+999)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for i := 0; i < 1000; i++ { // timestamps base … base+999000: records 0 … 999
		sum += int64(i%97) - 40
	}
	aggAll, err := cl.Aggregate(cx, "demo", "ticks", base, base+999*1000)
	if err != nil || aggAll.Count != 1000 || aggAll.Sum.Int64() != sum || aggAll.Min != -40 || aggAll.Max != 56 {
		t.Fatalf("aggregate: %+v (want count 1000 sum %d min -40 max 56), %v", aggAll, sum, err)
	}
	if agg.Count != 1 || agg.Sum.Int64() != -40 { // [base, base+999] holds record 0 only
		t.Fatalf("aggregate of the first microsecond: %+v", agg)
	}

	// A non-primary refuses reads and appends, naming the primary's address.
	raw := c.client(other.name).StreamsAPI()
	rs, err := raw.ReadRecords(cx, &meridianpb.ReadRecordsRequest{Keyspace: "demo", Stream: "ticks"})
	if err == nil {
		_, err = rs.Recv()
	}
	if s, _ := status.FromError(err); s.Code() != codes.FailedPrecondition || !strings.Contains(s.Message(), primary.listen) {
		t.Fatalf("read at a non-primary: %v", err)
	}
	if _, err := raw.Aggregate(cx, &meridianpb.AggregateRequest{Keyspace: "demo", Stream: "ticks"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("aggregate at a non-primary: %v", err)
	}
	d, err := c.client(primary.name).DescribeStream(cx, "demo", "ticks")
	if err != nil || !d.Live || d.Records != uint64(n) {
		t.Fatalf("describe at the primary: %+v, %v", d, err)
	}

	// The subscriber has every record.
	eventually(t, "subscriber caught up", func() error {
		subMu.Lock()
		defer subMu.Unlock()
		if len(subRecs) < len(model) {
			return fmt.Errorf("%d of %d records", len(subRecs)/R, n)
		}
		if !bytes.Equal(subRecs[:len(model)], model) {
			return fmt.Errorf("the subscriber's records differ")
		}
		return nil
	})

	// The CLI: describe, append synthetic records, read as CSV and JSON, aggregate.
	ep := other.listen
	runCLI(t, "stream", "describe", "--endpoint", ep, "demo", "ticks").mustSucceed(t)
	out := runCLI(t, "stream", "read", "--endpoint", ep, "demo", "ticks", "--first", "3", "--count", "2", "--format", "csv").mustSucceed(t).stdout
	want := fmt.Sprintf("record,timestamp,value\n3,%d,%d\n4,%d,%d\n", base+3000, 3-40, base+4000, 4-40)
	if out != want {
		t.Fatalf("CLI read csv: %q, want %q", out, want)
	}
	out = runCLI(t, "stream", "read", "--endpoint", ep, "demo", "ticks", "--from", fmt.Sprint(base+5000), "--to", fmt.Sprint(base+5000), "--format", "json").mustSucceed(t).stdout
	if want := fmt.Sprintf(`{"record":5,"timestamp":%d,"value":%d}`+"\n", base+5000, 5-40); out != want {
		t.Fatalf("CLI read json: %q, want %q", out, want)
	}
	res := runCLI(t, "stream", "append", "--endpoint", ep, "demo", "ticks", "--generate", "500", "--batch", "100", "--start", fmt.Sprint(base+int64(n)*1000), "--step", "1us").mustSucceed(t)
	if !strings.Contains(res.stderr, fmt.Sprintf("appended 500 records to demo/ticks (records %d to %d)", n, n+499)) {
		t.Fatalf("CLI append: %v", res)
	}
	model = append(model, mk(n, 500)...)
	for i := n; i < n+500; i++ { // the CLI's values are 0, 1, 2, …
		binary.LittleEndian.PutUint64(model[i*R+8:], uint64(i-n))
	}
	n += 500
	runCLI(t, "stream", "append", "--endpoint", ep, "demo", "ticks", "--generate", "1", "--start", "5").mustFailOneLine(t, "invalid argument", "timestamp 5")
	runCLI(t, "stream", "read", "--endpoint", ep, "demo", "nope").mustFailOneLine(t, "not found", `no stream "nope"`)
	out = runCLI(t, "stream", "aggregate", "--endpoint", ep, "demo", "ticks", "--from", fmt.Sprint(base+int64(n-500)*1000)).mustSucceed(t).stdout
	if !strings.Contains(out, "count 500\nsum 124750\nmin 0\nmax 499\n") {
		t.Fatalf("CLI aggregate: %q", out)
	}

	// The CLI's tail prints new records as they are appended.
	tailOut := &lockedBuffer{}
	tailCmd := exec.Command(binPath, "stream", "tail", "--endpoint", ep, "demo", "ticks", "--format", "csv")
	tailCmd.Stdout, tailCmd.Stderr = tailOut, tailOut
	if err := tailCmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer tailCmd.Process.Kill()
	tapp, err := c.client(other.name).NewAppender(cx, "demo", "ticks")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the CLI's tail prints an appended record", func() error {
		b := mk(n, 1)
		if _, err := tapp.Append(cx, b); err != nil {
			t.Fatalf("append: %v", err)
		}
		model = append(model, b...)
		n++
		if want := fmt.Sprintf("\n%d,%d,", n-1, base+int64(n-1)*1000); !strings.Contains(tailOut.String(), want) {
			return fmt.Errorf("tail printed %q, no %q yet", tailOut.String(), want)
		}
		return nil
	})
	tapp.Close()
	tailCmd.Process.Kill()
	tailCmd.Wait()

	// Kill -9 the primary during ingest; every acknowledged batch survives.
	app, err = c.client(other.name).NewAppender(cx, "demo", "ticks")
	if err != nil {
		t.Fatal(err)
	}
	type acked struct {
		first uint64
		recs  []byte
	}
	var acks []acked
	var stop atomic.Bool
	ingest := make(chan error, 1)
	next := n
	go func() {
		for !stop.Load() {
			batch := mk(next, 100)
			f, err := app.Append(cx, batch)
			if err != nil {
				ingest <- err
				return
			}
			acks = append(acks, acked{f, batch})
			next += 100
		}
		ingest <- nil
	}()
	eventually(t, "some acknowledged appends before the kill", func() error {
		if next < n+2000 {
			return fmt.Errorf("%d records appended", next-n)
		}
		return nil
	})
	c.kill(primary.name)
	stop.Store(true)
	ierr := <-ingest
	if ierr == nil || client.CodeOf(ierr) != codes.Unavailable {
		t.Logf("ingest ended with %v", ierr)
	}
	if serr := <-subDone; serr == nil {
		t.Logf("the subscription ended without an error when its primary died")
	}
	c.start(primary.name)
	c.waitReady(primary.name)
	pc := c.client(primary.name)
	var after []byte
	eventually(t, "reading the stream after the restart", func() error {
		it := pc.ReadRecords(cx, "demo", "ticks", 0, 0)
		after = after[:0]
		for it.Next() {
			after = append(after, it.Record().Bytes...)
		}
		return it.Err()
	})
	if !bytes.Equal(after[:len(model)], model) {
		t.Fatalf("the records before the kill changed")
	}
	for _, a := range acks {
		end := int(a.first)*R + len(a.recs)
		if end > len(after) || !bytes.Equal(after[int(a.first)*R:end], a.recs) {
			t.Fatalf("acknowledged batch at record %d (%d records) is not there after the restart (stream has %d records)", a.first, len(a.recs)/R, len(after)/R)
		}
	}
	t.Logf("%d batches acknowledged before the kill, all readable; the stream has %d records", len(acks), len(after)/R)
	// The subscriber's records are a prefix of the stream.
	subMu.Lock()
	if len(subRecs) > len(after) || !bytes.Equal(subRecs, after[:len(subRecs)]) {
		t.Fatalf("the subscriber saw %d records that are not the stream's prefix", len(subRecs)/R)
	}
	subMu.Unlock()
	// Appends go on after the restart; the stream can be dropped.
	app2, err := c.client(other.name).NewAppender(cx, "demo", "ticks")
	if err != nil {
		t.Fatal(err)
	}
	last := client.RecordTimestamp(after[len(after)-R:])
	b := client.NewBatch(R, 8)
	b.Add(last+1, 1)
	if f, err := app2.Append(cx, b.Bytes()); err != nil || f != uint64(len(after)/R) {
		t.Fatalf("append after the restart: record %d, %v", f, err)
	}
	app2.Close()
	if err := c.client("n3").DropStream(cx, "demo", "ticks", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.DescribeStream(cx, "demo", "ticks"); client.CodeOf(err) != codes.NotFound {
		t.Fatalf("describe after drop: %v", err)
	}
}

// TestStreamsReplicated: a replicated stream on three real processes. Every acknowledged
// batch is in both copies — read from the second node's files after it is SIGKILLed —; with
// the second node down an append fails with UNAVAILABLE; when it is back appends go on and
// its copy catches up.
func TestStreamsReplicated(t *testing.T) {
	skipShort(t)
	c := newCluster(t, threeNodes, nil)
	c.startAll()
	c.waitReady(c.names()...)
	cx, cancel := reqCtx()
	defer cancel()
	const R = 16
	info, err := c.client("n2").CreateStream(cx, &client.StreamSpec{Keyspace: "demo", Name: "rep", RecordBytes: R, ValueOffset: 8, Ack: "replicated"})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	second := c.node(info.Reader)
	t.Logf("stream rep: primary %s, second node %s", info.Primary, info.Reader)
	app, err := c.client("n3").NewAppender(cx, "demo", "rep")
	if err != nil {
		t.Fatal(err)
	}
	var model []byte
	ts := int64(1)
	mk := func(n int) []byte {
		b := client.NewBatch(R, 8)
		for range n {
			b.Add(ts, ts)
			ts++
		}
		return bytes.Clone(b.Bytes())
	}
	for range 20 {
		b := mk(100)
		if _, err := app.Append(cx, b); err != nil {
			t.Fatalf("append: %v", err)
		}
		model = append(model, b...)
	}
	// The second node down: appends fail visibly.
	c.kill(second.name)
	if _, err := app.Append(cx, mk(10)); client.CodeOf(err) != codes.Unavailable {
		t.Fatalf("append with the second node down: %v", err)
	}
	c.start(second.name)
	c.waitReady(second.name)
	eventually(t, "append with the second node back", func() error {
		b := mk(100)
		if _, err := app.Append(cx, b); err != nil {
			return err
		}
		model = append(model, b...)
		return nil
	})
	for range 10 {
		b := mk(100)
		if _, err := app.Append(cx, b); err != nil {
			t.Fatalf("append: %v", err)
		}
		model = append(model, b...)
	}
	app.Close()
	// The copy holds every acknowledged record, in order (and the failed batches' records,
	// which the primary kept and sent on: they are in both copies alike).
	c.kill(second.name)
	st, err := kawkab.OpenStream(filepath.Join(second.dataDir, "streams"), info.Id, kawkab.StreamOptions{})
	if err != nil {
		t.Fatalf("open the copy: %v", err)
	}
	cp, err := st.ReadRecords(0, int(st.Len()))
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	prim := c.client(info.Primary)
	var all []byte
	it := prim.ReadRecords(cx, "demo", "rep", 0, 0)
	for it.Next() {
		all = append(all, it.Record().Bytes...)
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cp, all) {
		t.Fatalf("the copy holds %d records, the primary %d", len(cp)/R, len(all)/R)
	}
	// Every acknowledged record is there, in order (a failed batch may sit between two).
	i := 0
	for off := 0; off < len(all) && i < len(model); off += R {
		if bytes.Equal(all[off:off+R], model[i:i+R]) {
			i += R
		}
	}
	if i != len(model) {
		t.Fatalf("acknowledged record %d is missing from the copies", i/R)
	}
	t.Logf("%d records acknowledged, %d in both copies", len(model)/R, len(all)/R)
}

// lockedBuffer is a bytes.Buffer a process writes to while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
