//go:build linux

package lab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"meridian/internal/mayflower"
	"meridian/internal/tools/flowsim"
	"meridian/internal/tools/lab/wan"
)

// The Mayflower lab (issue 19, thesis-mayflower-canopus-kawkab 3.4): the thesis's testbed —
// hosts in racks in pods, oversubscribed upper tiers (flowsim.Testbed) — built in the
// router as a fabric of shared multi-hop links, with one namespace per host, a file server
// on every host and real TCP connections fetching each job's chunks. Bandwidths and sizes
// are scaled down together (Scale), so completion times stay the thesis's seconds while
// the router carries a few megabytes per second. Each scheme's choices come from the same
// selector as the flow-level testbed's (flowsim.Selector); the chosen path of each chunk's
// data direction is pinned in the router (as the Flowserver installs OpenFlow rules); the
// model is polled every second from the router's per-flow counters (the switch counters).

// MayflowerLabOptions configure a run.
type MayflowerLabOptions struct {
	Dir string
	Exe string
	// Flow holds the workload and testbed as for the flow-level testbed, unscaled (the
	// thesis's 1 Gbps edges and 128 MB jobs); Scale multiplies bandwidths and sizes.
	Flow    flowsim.Options
	Scale   float64
	Schemes []flowsim.Scheme
	// Drain bounds the wait for jobs after the last arrival (default 60 s); a job not done
	// by then counts as incomplete.
	Drain time.Duration
	// LinkDelay is each fabric link's propagation delay (default 50 µs: a data centre).
	LinkDelay time.Duration
	// LinkQueue bounds each fabric link's queue (default 300 ms: about 125 packets at the
	// 5 Mbps edges of the default scale, 60 at the 2.5 Mbps pod uplinks — a switch port's
	// buffer counted in packets, which is what TCP sees; time is not scaled, so a buffer of
	// a real port's ~1 ms at 1 Gbps would be less than one packet here).
	LinkQueue time.Duration
	Seed      uint64
	Log       io.Writer
}

// MayflowerLabRow is one scheme's result: in the lab with real TCP, and on the flow-level
// testbed for the very same jobs.
type MayflowerLabRow struct {
	Scheme     flowsim.Scheme `json:"scheme"`
	Lab        flowsim.Result `json:"lab"`
	Flow       flowsim.Result `json:"flow"`
	Incomplete int            `json:"incomplete"`
	// Router health over the scheme's run.
	LatenessP99Us float64 `json:"router_lateness_p99_us"`
	DroppedQueue  int64   `json:"fabric_queue_drops"`
	SplitJobs     int     `json:"split_jobs"`
}

// MayflowerLabResult is the whole run.
type MayflowerLabResult struct {
	Options MayflowerLabOptions `json:"-"`
	Jobs    int                 `json:"jobs"`
	Rows    []MayflowerLabRow   `json:"rows"`
}

const fileServerPort = 7000

// maxChunkRequestBytes bounds what a file server sends for one request.
const maxChunkRequestBytes = 1 << 30

func (o *MayflowerLabOptions) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// scaled returns the options with bandwidths and sizes multiplied by Scale.
func (o MayflowerLabOptions) scaled() flowsim.Options {
	f := o.Flow
	f.EnsureDefaults()
	f.Testbed.EdgeBps *= o.Scale
	f.JobBytes *= o.Scale
	f.ChunkBytes *= o.Scale
	f.Seed = o.Seed
	return f
}

func (o *MayflowerLabOptions) validate() error {
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	if o.Drain == 0 {
		o.Drain = 60 * time.Second
	}
	if o.LinkDelay == 0 {
		o.LinkDelay = 50 * time.Microsecond
	}
	if o.LinkQueue == 0 {
		o.LinkQueue = 300 * time.Millisecond
	}
	switch {
	case !(o.Scale > 0) || o.Scale > 1:
		return fmt.Errorf("lab mayflower: scale %v: want (0, 1]", o.Scale)
	case o.Drain < 0 || o.Drain > time.Hour:
		return fmt.Errorf("lab mayflower: drain %v: want up to an hour", o.Drain)
	case o.LinkQueue < 0 || o.LinkQueue > 10*time.Second:
		return fmt.Errorf("lab mayflower: link queue %v: want up to 10s", o.LinkQueue)
	case o.LinkDelay < 0 || o.LinkDelay > time.Second:
		return fmt.Errorf("lab mayflower: link delay %v: want up to 1s", o.LinkDelay)
	case len(o.Schemes) == 0:
		return errors.New("lab mayflower: no scheme")
	}
	f := o.scaled()
	if f.Background != 0 || f.EndpointOnly {
		return errors.New("lab mayflower: background flows and the endpoint-only view are flow-level options only")
	}
	if f.ChunkBytes < 16<<10 {
		return fmt.Errorf("lab mayflower: chunks of %.0f bytes at this scale; want at least 16 KiB (raise --scale)", f.ChunkBytes)
	}
	if f.Testbed.EdgeBps*8/1e6*float64(f.Testbed.Hosts()) > 2000 {
		return fmt.Errorf("lab mayflower: %d hosts at %.0f Mbps edges: more than the router carries (lower --scale)", f.Testbed.Hosts(), f.Testbed.EdgeBps*8/1e6)
	}
	for _, sc := range o.Schemes {
		if _, err := flowsim.NewSelector(flowsim.Options{Testbed: f.Testbed, Scheme: sc}); err != nil {
			return fmt.Errorf("lab mayflower: %w", err)
		}
	}
	return nil
}

// fabricLayout is the lab's hosts and fabric for a testbed: host h of pod p is 10.78.p+1.k.
func fabricLayout(t flowsim.Testbed, linkDelay, linkQueue time.Duration) (*Layout, *wan.Fabric, error) {
	if err := t.Validate(); err != nil {
		return nil, nil, err
	}
	perPod := t.RacksPerPod * t.HostsPerRack
	if perPod > 250 || t.Pods > 250 {
		return nil, nil, fmt.Errorf("lab mayflower: %d pods of %d hosts: at most 250 each", t.Pods, perPod)
	}
	l := &Layout{}
	for h := range t.Hosts() {
		pl := t.Place(h)
		name := fmt.Sprintf("ft-h%d", h)
		l.Hosts = append(l.Hosts, Host{Name: name, Region: fmt.Sprintf("pod%d", pl.Pod), Role: "fabric",
			Addr:  netip.AddrFrom4([4]byte{10, 78, byte(pl.Pod + 1), byte(h%perPod + 1)}),
			Netns: NetnsPrefix + name, TUN: fmt.Sprintf("mlab%d", h)})
	}
	caps := t.Links()
	names := make([]string, 0, len(caps))
	for n := range caps {
		names = append(names, n)
	}
	sort.Strings(names)
	f := &wan.Fabric{}
	index := map[string]int32{}
	for i, n := range names {
		index[n] = int32(i)
		f.Links = append(f.Links, wan.FabricLink{Name: n, BandwidthMbps: caps[n] * 8 / 1e6, DelayMs: float64(linkDelay) / float64(time.Millisecond),
			QueueMs: float64(linkQueue) / float64(time.Millisecond)})
	}
	n := t.Hosts()
	f.Paths = make([][][][]int32, n)
	for s := range n {
		f.Paths[s] = make([][][]int32, n)
		for d := range n {
			for _, p := range t.Paths(s, d) {
				ids := make([]int32, len(p))
				for k, ln := range p {
					ids[k] = index[ln]
				}
				f.Paths[s][d] = append(f.Paths[s][d], ids)
			}
		}
	}
	return l, f, f.Validate(n)
}

// upFabric creates the hosts' namespaces and starts the router over the fabric.
func upFabric(ctx context.Context, o MayflowerLabOptions, t flowsim.Testbed) (*State, error) {
	if err := CheckPrivileges(); err != nil {
		return nil, err
	}
	exe, err := exePath(o.Exe)
	if err != nil {
		return nil, err
	}
	layout, fabric, err := fabricLayout(t, o.LinkDelay, o.LinkQueue)
	if err != nil {
		return nil, err
	}
	st := &State{Layout: layout, Fabric: fabric}
	if err := bringUp(ctx, o.Dir, exe, o.Seed, st); err != nil {
		return nil, err
	}
	o.logf("lab mayflower: %d hosts up (%d pods × %d racks × %d hosts), %d fabric links, router pid %d",
		len(layout.Hosts), t.Pods, t.RacksPerPod, t.HostsPerRack, len(fabric.Links), st.RouterPid)
	return st, nil
}

// serveFiles answers each connection's 8-byte big-endian size with that many bytes, then
// closes (the server closes first, so clients' ports are free again at once).
func serveFiles(l net.Listener) {
	zeros := make([]byte, 64<<10)
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			var hdr [8]byte
			_ = c.SetDeadline(time.Now().Add(10 * time.Minute))
			if _, err := io.ReadFull(c, hdr[:]); err != nil {
				return
			}
			left := binary.BigEndian.Uint64(hdr[:])
			if left > maxChunkRequestBytes {
				return
			}
			for left > 0 {
				n := min(left, uint64(len(zeros)))
				if _, err := c.Write(zeros[:n]); err != nil {
					return
				}
				left -= n
			}
		}()
	}
}

// labFlow is one chunk in flight, as the poller sees it.
type labFlow struct {
	key      wan.FlowKey
	size     float64
	placedAt time.Time
	lastSeen int64 // delivered bytes at the last poll
	lastAt   time.Time
}

// RunMayflowerLab brings up the fabric lab, runs every scheme on the same jobs, and tears
// the lab down.
func RunMayflowerLab(ctx context.Context, o MayflowerLabOptions) (*MayflowerLabResult, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	f := o.scaled()
	workload, err := flowsim.Workload(f)
	if err != nil {
		return nil, err
	}
	st, err := upFabric(ctx, o, f.Testbed)
	if err != nil {
		return nil, err
	}
	defer func() { _ = Down(context.Background(), o.Dir, o.Log) }()
	hosts := st.Layout.Hosts
	for _, h := range hosts {
		l, err := ListenIn(h.Netns, "tcp", netip.AddrPortFrom(h.Addr, fileServerPort).String())
		if err != nil {
			return nil, fmt.Errorf("lab mayflower: file server on %s: %w", h.Name, err)
		}
		defer l.Close()
		go serveFiles(l)
	}
	router := wan.NewClient(RouterSocket(o.Dir))
	res := &MayflowerLabResult{Options: o, Jobs: len(workload)}
	for _, sc := range o.Schemes {
		row, err := runLabScheme(ctx, o, f, sc, workload, hosts, router)
		if err != nil {
			return nil, err
		}
		flow, err := flowsim.RunWorkload(f, sc, workload)
		if err != nil {
			return nil, err
		}
		row.Flow = flow
		res.Rows = append(res.Rows, row)
		o.logf("lab mayflower: %s: lab mean %.2f s p95 %.2f s (%d incomplete); flow-level mean %.2f s p95 %.2f s",
			sc, row.Lab.Mean, row.Lab.P95, row.Incomplete, flow.Mean, flow.P95)
	}
	return res, nil
}

// runLabScheme runs the workload's jobs at their arrival times under one scheme.
func runLabScheme(ctx context.Context, o MayflowerLabOptions, f flowsim.Options, sc flowsim.Scheme, workload []flowsim.JobSpec,
	hosts []Host, router *wan.Client) (MayflowerLabRow, error) {
	row := MayflowerLabRow{Scheme: sc}
	f.Scheme = sc
	sel, err := flowsim.NewSelector(f)
	if err != nil {
		return row, err
	}
	if err := router.ResetLateness(ctx); err != nil {
		return row, err
	}
	before, err := router.Status(ctx)
	if err != nil {
		return row, err
	}
	var (
		mu      sync.Mutex // guards sel, flows, nextID
		flows   = map[mayflower.FlowID]*labFlow{}
		nextID  mayflower.FlowID
		ports   = make([]atomic.Uint32, len(hosts))
		times   = make([]float64, len(workload))
		done    = make([]atomic.Bool, len(workload))
		firstEr atomic.Pointer[error]
	)
	fail := func(err error) { firstEr.CompareAndSwap(nil, &err) }
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	pollInterval := time.Duration(f.PollInterval * float64(time.Second))
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		t := time.NewTicker(pollInterval)
		defer t.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
			}
			pinned, err := router.Flows(runCtx)
			if err != nil {
				continue // the next poll tries again
			}
			delivered := make(map[wan.FlowKey]int64, len(pinned))
			for _, p := range pinned {
				delivered[p.Key] = p.DeliveredBytes
			}
			now := time.Now()
			mu.Lock()
			for id, fl := range flows {
				got, ok := delivered[fl.key]
				if !ok {
					continue
				}
				// Update-freeze (3.2.2): a flow placed less than a poll ago keeps its estimate.
				if now.Sub(fl.placedAt) >= pollInterval {
					rate := float64(got-fl.lastSeen) / now.Sub(fl.lastAt).Seconds()
					_ = sel.Update(id, math.Max(0, rate), math.Max(0, fl.size-float64(got)))
				}
				fl.lastSeen, fl.lastAt = got, now
			}
			mu.Unlock()
		}
	}()
	// fetch reads one chunk of size bytes from replica r to client c over path k of the
	// pair, pinned in the router.
	fetch := func(c, r int, choice flowsim.Choice, size float64) error {
		port := uint16(20000 + ports[c].Add(1)%40000)
		key := wan.FlowKey{Src: hosts[r].Addr, Dst: hosts[c].Addr, Proto: 6, SrcPort: fileServerPort, DstPort: port}
		if err := router.Pin(runCtx, []wan.PinnedFlow{{Key: key, Path: choice.PathIndex}}); err != nil {
			return err
		}
		defer func() { _ = router.Unpin(context.Background(), []wan.FlowKey{key}) }()
		mu.Lock()
		nextID++
		id := nextID
		err := sel.Started(id, choice.Path, size)
		now := time.Now()
		flows[id] = &labFlow{key: key, size: size, placedAt: now, lastAt: now}
		mu.Unlock()
		defer func() {
			mu.Lock()
			delete(flows, id)
			sel.Finished(id)
			mu.Unlock()
		}()
		if err != nil {
			return err
		}
		var conn net.Conn
		err = runInNetns(hosts[c].Netns, func() error {
			d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: hosts[c].Addr.AsSlice(), Port: int(port)}}
			var err error
			conn, err = d.DialContext(runCtx, "tcp", netip.AddrPortFrom(hosts[r].Addr, fileServerPort).String())
			return err
		})
		if err != nil {
			return fmt.Errorf("dial %s from %s:%d: %w", hosts[r].Name, hosts[c].Name, port, err)
		}
		defer conn.Close()
		stop := context.AfterFunc(runCtx, func() { _ = conn.SetDeadline(time.Now()) })
		defer stop()
		var hdr [8]byte
		binary.BigEndian.PutUint64(hdr[:], uint64(size))
		if _, err := conn.Write(hdr[:]); err != nil {
			return err
		}
		n, err := io.Copy(io.Discard, conn)
		if err != nil {
			return err
		}
		if n != int64(size) {
			return fmt.Errorf("chunk from %s: %d of %.0f bytes", hosts[r].Name, n, size)
		}
		return nil
	}
	chunks := int(math.Ceil(f.JobBytes / f.ChunkBytes))
	runJob := func(i int, j flowsim.JobSpec, arrival time.Time) {
		mu.Lock()
		choices, err := sel.Choose(j.Client, j.Replicas)
		mu.Unlock()
		if err != nil {
			fail(err)
			return
		}
		// Chunks in proportion to the parts' shares (at least one each); a part that runs
		// out takes the other's unstarted chunks (as flowsim does).
		var jmu sync.Mutex
		queue := make([]int, len(choices))
		bytesLeft := f.JobBytes
		if len(choices) == 2 {
			first := min(max(int(math.Round(float64(chunks)*choices[0].Share)), 1), chunks-1)
			queue[0], queue[1] = first, chunks-first
		} else {
			queue[0] = chunks
		}
		take := func(k int) (float64, bool) {
			jmu.Lock()
			defer jmu.Unlock()
			if queue[k] == 0 {
				other := 1 - k
				if len(queue) < 2 || queue[other] == 0 {
					return 0, false
				}
				queue[other]--
				queue[k]++
			}
			queue[k]--
			size := math.Min(f.ChunkBytes, bytesLeft)
			bytesLeft -= size
			return size, true
		}
		var wg sync.WaitGroup
		var failed atomic.Bool
		for k, ch := range choices {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range chunks { // bounded: at most every chunk of the job
					size, ok := take(k)
					if !ok {
						return
					}
					if err := fetch(j.Client, ch.Replica, ch, size); err != nil {
						if runCtx.Err() == nil {
							fail(fmt.Errorf("job %d: %w", i, err))
						}
						failed.Store(true)
						return
					}
				}
			}()
		}
		wg.Wait()
		if !failed.Load() {
			times[i] = time.Since(arrival).Seconds()
			done[i].Store(true)
		}
		if len(choices) == 2 {
			mu.Lock()
			row.SplitJobs++
			mu.Unlock()
		}
	}
	start := time.Now()
	var jobs sync.WaitGroup
	for i, j := range workload {
		arrival := start.Add(time.Duration(j.Arrival * float64(time.Second)))
		select {
		case <-ctx.Done():
			return row, ctx.Err()
		case <-time.After(time.Until(arrival)):
		}
		if e := firstEr.Load(); e != nil {
			return row, fmt.Errorf("lab mayflower: %s: %w", sc, *e)
		}
		jobs.Add(1)
		go func() { defer jobs.Done(); runJob(i, j, arrival) }()
	}
	allDone := make(chan struct{})
	go func() { jobs.Wait(); close(allDone) }()
	select {
	case <-allDone:
	case <-time.After(o.Drain):
		o.logf("lab mayflower: %s: jobs still running %v after the last arrival; counted incomplete", sc, o.Drain)
	case <-ctx.Done():
		return row, ctx.Err()
	}
	cancel()
	<-allDone
	<-pollDone
	if e := firstEr.Load(); e != nil {
		return row, fmt.Errorf("lab mayflower: %s: %w", sc, *e)
	}
	var finished []float64
	for i := range workload {
		if done[i].Load() {
			finished = append(finished, times[i])
		} else {
			row.Incomplete++
		}
	}
	row.Lab = flowsim.Summarise(finished)
	row.Lab.Scheme, row.Lab.Split = sc, row.SplitJobs
	after, err := router.Status(ctx)
	if err != nil {
		return row, err
	}
	row.LatenessP99Us = after.LatenessP99Us
	for k, l := range after.FabricLinks {
		row.DroppedQueue += l.DroppedQueue - before.FabricLinks[k].DroppedQueue
	}
	return row, nil
}

// Markdown is the run as a table: each scheme in the lab and on the flow-level testbed for
// the same jobs, and the ratios to Mayflower-P (makespan) in both.
func (r *MayflowerLabResult) Markdown() string {
	var b strings.Builder
	o := r.Options
	f := o.scaled()
	t := f.Testbed
	fmt.Fprintf(&b, "Lab: %d hosts (%d pods × %d racks × %d hosts) in namespaces, real TCP through the router's fabric; edges %.1f Mbps (the thesis's 1 Gbps × %.4g), oversubscription %.0f:1 (%.0f × %.0f); jobs of %.0f KiB in %.0f KiB chunks (128 MB in 32 MB × %.4g); %.2f jobs/s per host; locality %v; %d jobs (seed %d), the same for every scheme.\n\n",
		t.Hosts(), t.Pods, t.RacksPerPod, t.HostsPerRack, t.EdgeBps*8/1e6, o.Scale, t.Oversubscription(), t.RackOversubscription, t.PodOversubscription,
		f.JobBytes/1024, f.ChunkBytes/1024, o.Scale, f.RatePerHost, f.Locality, r.Jobs, o.Seed)
	b.WriteString("| scheme | lab mean s | lab p50 s | lab p95 s | lab p99 s | flow-level mean s | flow-level p95 s | lab / flow-level (mean) | lab mean / Mayflower-P | flow-level mean / Mayflower-P | split jobs | incomplete | fabric queue drops | router lateness p99 µs |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	ref := slices.IndexFunc(r.Rows, func(x MayflowerLabRow) bool { return x.Scheme == flowsim.MayflowerPMakespan })
	ratio := func(x, y float64) string {
		if y <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", x/y)
	}
	for _, x := range r.Rows {
		labRef, flowRef := 0.0, 0.0
		if ref >= 0 {
			labRef, flowRef = r.Rows[ref].Lab.Mean, r.Rows[ref].Flow.Mean
		}
		fmt.Fprintf(&b, "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %s | %s | %d | %d | %d | %.0f |\n",
			x.Scheme, x.Lab.Mean, x.Lab.P50, x.Lab.P95, x.Lab.P99, x.Flow.Mean, x.Flow.P95, ratio(x.Lab.Mean, x.Flow.Mean),
			ratio(x.Lab.Mean, labRef), ratio(x.Flow.Mean, flowRef), x.SplitJobs, x.Incomplete, x.DroppedQueue, x.LatenessP99Us)
	}
	return b.String()
}
