package kawkab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
)

// Reading data blocks through the buffer cache, from the local chunk files or the object
// store (thesis 5.3.2: the memory manager serves reads, misses go to the local store, and a
// chunk no longer local is read from the global store; 5.7.5, Fig. 5.12: historical reads
// fetch ranges of a chunk from the object store). Used by a Store's streams (local chunks,
// deleted chunks from the object store) and by RemoteStream (the object store only).

// readStats counts what reads fetched from the object store.
type readStats struct {
	gets, getBytes      atomic.Uint64 // data GETs and their bytes
	indexGets, idxBytes atomic.Uint64 // index node GETs and their bytes
}

// blockReader reads a stream's records block by block.
type blockReader struct {
	id    uint64
	lay   Layout
	cache *Cache // nil: no cache

	local *chunkStore // nil: no local chunks (a remote reader)
	// gone reports that local chunk c was deleted after its upload: read it from obj.
	gone func(c uint64) bool
	// touch records a read of local chunk c (least-recently-used deletion).
	touch func(c uint64)

	obj    ObjectStore // nil: local only
	prefix string
	ctx    context.Context
	// rangeBlocks is the most blocks one ranged GET fetches; 0 fetches whole chunks.
	rangeBlocks int
	// parallel bounds the GETs one read has in flight.
	parallel int
	// spawn runs f(0) … f(n−1), at most parallel at a time, and waits for them.
	spawn func(n, parallel int, f func(i int))

	stats *readStats

	// fetching holds the blocks being fetched from the object store, so that concurrent
	// reads of a block wait for one GET instead of issuing their own (single flight).
	fmu      sync.Mutex
	fetching map[uint64]*blockFetch
}

// blockFetch is a block being fetched: done is closed when data (its bytes) or err is set.
type blockFetch struct {
	done chan struct{}
	data []byte
	err  error
}

// claim splits blocks into those this read fetches (claimed) and those another read is
// fetching (waits).
func (br *blockReader) claim(blocks []uint64) (mine []uint64, claimed, waits map[uint64]*blockFetch) {
	br.fmu.Lock()
	defer br.fmu.Unlock()
	if br.fetching == nil {
		br.fetching = map[uint64]*blockFetch{}
	}
	claimed, waits = map[uint64]*blockFetch{}, map[uint64]*blockFetch{}
	for _, b := range blocks {
		if f := br.fetching[b]; f != nil {
			waits[b] = f
			continue
		}
		f := &blockFetch{done: make(chan struct{})}
		br.fetching[b] = f
		claimed[b] = f
		mine = append(mine, b)
	}
	return mine, claimed, waits
}

// publish ends the claimed fetches: their waiters get the bytes, or for a block this read did
// not get, an error wrapping cause (the fetch's).
func (br *blockReader) publish(claimed map[uint64]*blockFetch, cause error) {
	br.fmu.Lock()
	defer br.fmu.Unlock()
	for b, f := range claimed {
		if f.data == nil {
			f.err = fmt.Errorf("block %d: the read fetching it failed: %w", b, cause)
		}
		delete(br.fetching, b)
		close(f.done)
	}
}

// goSpawn is spawn with plain goroutines.
func goSpawn(n, parallel int, f func(i int)) {
	if n == 1 || parallel <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}

// virtualSpawn is spawn on a VirtualClock: the GETs take part in the clock and the caller
// waits for them without holding virtual time back (tests and modelled benchmarks only: it
// waits for every goroutine of the clock, so one read at a time).
func virtualSpawn(vc *VirtualClock) func(n, parallel int, f func(i int)) {
	return func(n, parallel int, f func(i int)) {
		next := atomic.Int64{}
		for range min(n, max(parallel, 1)) {
			vc.Go(func() {
				for {
					i := int(next.Add(1) - 1)
					if i >= n {
						return
					}
					f(i)
				}
			})
		}
		vc.Wait()
	}
}

func (br *blockReader) key(b uint64) BlockKey { return BlockKey{Stream: br.id, Kind: KindData, Num: b} }

// read reads records first … first+len(out)/R−1 into out; vis is the number of visible
// records (blocks wholly before it are complete and may be cached).
func (br *blockReader) read(out []byte, first, vis uint64) error {
	R := uint64(br.lay.R)
	n := uint64(len(out)) / R
	for i := uint64(0); i < n; {
		r := first + i
		cnt := min(n-i, br.lay.PerChunk-r%br.lay.PerChunk)
		if err := br.readChunk(out[i*R:(i+cnt)*R], r, vis); err != nil {
			return fmt.Errorf("kawkab: stream %d: read records %d to %d: %w", br.id, r, r+cnt-1, err)
		}
		i += cnt
	}
	return nil
}

// blockRun is a run of consecutive blocks of one chunk fetched together: bytes [start, end)
// of the chunk.
type blockRun struct {
	b0, b1     uint64 // blocks [b0, b1]
	start, end int64
	// need is the end of the last requested record in the run: a local file may end there
	// (a block's unused tail is written with the next block's first record), the rest of
	// the run's bytes are then the tail's zeros.
	need int64
	data []byte
}

// readChunk reads the records [r0, r0+len(out)/R) of one chunk.
func (br *blockReader) readChunk(out []byte, r0, vis uint64) error {
	lay := br.lay
	R := uint64(lay.R)
	rEnd := r0 + uint64(len(out))/R
	c := lay.Locate(r0).Chunk
	b0, b1 := lay.Locate(r0).Block, lay.Locate(rEnd-1).Block
	sealed := vis / uint64(lay.PerBlock) // blocks before it are complete
	full := lay.FullChunkFileBytes()

	// copyOut copies block b's requested records from its bytes (the block's slot in the
	// chunk starting at blockBytes[0]).
	copyOut := func(b uint64, blockBytes []byte) {
		lo, hi := max(r0, lay.FirstRecord(b)), min(rEnd, lay.FirstRecord(b+1))
		slot := lo - lay.FirstRecord(b)
		copy(out[(lo-r0)*R:(hi-r0)*R], blockBytes[slot*R:(slot+hi-lo)*R])
	}

	var missing []uint64
	for b := b0; b <= b1; b++ {
		if br.cache != nil && b < sealed {
			if h, ok := br.cache.Lookup(br.key(b)); ok {
				copyOut(b, h.Bytes())
				h.Release()
				continue
			}
		}
		missing = append(missing, b)
	}
	if len(missing) == 0 {
		return nil
	}
	blockStart := func(b uint64) int64 { return int64(b%ChunkBlocks) * BlockBytes }
	// The end of what is read of block b: the whole block (its unused tail cut at the chunk's
	// end) when it is complete, else just past the last requested record.
	blockEnd := func(b uint64) int64 {
		if b < sealed || lay.FirstRecord(b+1) <= rEnd {
			return min(blockStart(b)+BlockBytes, full)
		}
		return lay.Locate(rEnd-1).Offset + int64(R)
	}
	remote := br.local == nil || (br.gone != nil && br.gone(c))
	var waits map[uint64]*blockFetch
	if remote {
		// Single flight: the blocks another read is fetching now are waited for, the others
		// claimed. The claimed ones are published as soon as they are fetched — before this
		// read waits for others, so two reads never wait for each other — or as failed.
		var claimed map[uint64]*blockFetch
		missing, claimed, waits = br.claim(missing)
		published := false
		publish := func(cause error) {
			if !published {
				published = true
				br.publish(claimed, cause)
			}
		}
		defer publish(errors.New("the read ended"))
		if len(missing) > 0 {
			if err := br.fetch(c, missing, b0, b1, sealed, blockStart, blockEnd, rEnd, true, copyOut, claimed); err != nil {
				publish(err)
				return err
			}
		}
		publish(errors.New("incomplete block"))
		for b, f := range waits {
			select {
			case <-f.done:
			case <-br.ctx.Done():
				return fmt.Errorf("block %d: %w", b, br.ctx.Err())
			}
			if f.err != nil {
				return f.err
			}
			copyOut(b, f.data)
		}
		return nil
	}
	return br.fetch(c, missing, b0, b1, sealed, blockStart, blockEnd, rEnd, false, copyOut, nil)
}

// fetch reads the missing blocks of chunk c (of a read of blocks b0 … b1 ending before record
// rEnd) in runs — one pread each from the local file, or ranged GETs (whole-chunk GETs) from
// the object store — copies the requested records out, sets the bytes of the claimed blocks,
// and inserts the complete blocks into the cache.
func (br *blockReader) fetch(c uint64, missing []uint64, b0, b1, sealed uint64, blockStart, blockEnd func(uint64) int64,
	rEnd uint64, remote bool, copyOut func(uint64, []byte), claimed map[uint64]*blockFetch) error {
	lay := br.lay
	R := uint64(lay.R)
	maxRun := uint64(ChunkBlocks)
	if remote && br.rangeBlocks > 0 {
		maxRun = uint64(br.rangeBlocks)
	}
	var runs []blockRun
	for _, b := range missing {
		if k := len(runs) - 1; k >= 0 && runs[k].b1+1 == b && b-runs[k].b0 < maxRun {
			runs[k].b1 = b
			continue
		}
		runs = append(runs, blockRun{b0: b, b1: b})
	}
	for i := range runs {
		runs[i].start, runs[i].end = blockStart(runs[i].b0), blockEnd(runs[i].b1)
		runs[i].need = lay.Locate(min(rEnd, lay.FirstRecord(runs[i].b1+1))-1).Offset + int64(R)
	}
	if !remote {
		if br.touch != nil {
			br.touch(c)
		}
		err := br.readLocal(c, runs)
		switch {
		case err == nil:
		case errors.Is(err, fs.ErrNotExist) && br.obj != nil && br.gone != nil && br.gone(c):
			// Deleted after its upload while this read was on its way: from the object store.
			if br.rangeBlocks > 0 {
				runs = splitRuns(runs, uint64(br.rangeBlocks), blockStart, blockEnd)
			}
			remote = true
		default:
			return err
		}
	}
	var wholeChunk []byte
	if remote {
		if br.obj == nil {
			return fmt.Errorf("data chunk %d is not local and there is no object store", c)
		}
		var err error
		if wholeChunk, err = br.readRemote(c, runs); err != nil {
			return err
		}
	}
	if wholeChunk != nil && br.cache != nil {
		// A whole chunk was fetched: keep all of it (the next reads of the chunk are hits).
		for b := c * ChunkBlocks; b < (c+1)*ChunkBlocks && b < sealed; b++ {
			if b >= b0 && b <= b1 {
				continue // the blocks read are inserted below
			}
			off := blockStart(b)
			bb := wholeChunk[off:min(off+BlockBytes, int64(len(wholeChunk)))]
			if h, err := br.cache.Get(br.key(b), func(buf []byte) error { copy(buf, bb); return nil }); err == nil {
				h.Release()
			}
		}
	}
	for _, run := range runs {
		for b := run.b0; b <= run.b1; b++ {
			off := blockStart(b) - run.start
			bb := run.data[off:min(off+BlockBytes, int64(len(run.data)))]
			copyOut(b, bb)
			if f := claimed[b]; f != nil && b < sealed {
				f.data = bb // a whole block (blocks in the object store are complete)
			}
			if br.cache != nil && b < sealed {
				if h, err := br.cache.Get(br.key(b), func(buf []byte) error { copy(buf, bb); return nil }); err == nil {
					h.Release()
				} // ErrCacheFull: the block is just not cached
			}
		}
	}
	return nil
}

// splitRuns cuts runs into runs of at most maxRun blocks.
func splitRuns(runs []blockRun, maxRun uint64, start func(uint64) int64, end func(uint64) int64) []blockRun {
	var out []blockRun
	for _, r := range runs {
		for b := r.b0; b <= r.b1; b += maxRun {
			e := min(r.b1, b+maxRun-1)
			out = append(out, blockRun{b0: b, b1: e, start: start(b), end: end(e)})
		}
	}
	return out
}

// readLocal reads the runs from local chunk file c (one pread each).
func (br *blockReader) readLocal(c uint64, runs []blockRun) error {
	h, err := br.local.files.get(fileKey{'d', c}, false)
	if err != nil {
		return fmt.Errorf("read %s: %w", DataChunkName(c), err)
	}
	defer br.local.files.put(h)
	for i := range runs {
		r := &runs[i]
		r.data = make([]byte, r.end-r.start)
		if n, err := h.f.ReadAt(r.data, r.start); n < len(r.data) && r.start+int64(n) < r.need {
			return fmt.Errorf("read %s: bytes %d to %d: %d read: %w", DataChunkName(c), r.start, r.end, n, err)
		}
	}
	return nil
}

// readRemote fetches the runs of chunk c from the object store: one ranged GET per run, at
// most parallel at a time, or (rangeBlocks 0) one GET of the whole chunk, which it returns.
func (br *blockReader) readRemote(c uint64, runs []blockRun) (whole []byte, err error) {
	key := streamKey(br.prefix, br.id, DataChunkName(c))
	if br.rangeBlocks <= 0 {
		b, err := br.obj.Get(br.ctx, key, 0, -1)
		br.stats.gets.Add(1)
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", key, err)
		}
		br.stats.getBytes.Add(uint64(len(b)))
		if int64(len(b)) != br.lay.FullChunkFileBytes() {
			return nil, fmt.Errorf("get %s: %d bytes, a full chunk is %d", key, len(b), br.lay.FullChunkFileBytes())
		}
		for i := range runs {
			runs[i].data = b[runs[i].start:runs[i].end]
		}
		return b, nil
	}
	errs := make([]error, len(runs))
	br.spawn(len(runs), br.parallel, func(i int) {
		r := &runs[i]
		b, err := br.obj.Get(br.ctx, key, r.start, r.end-r.start)
		br.stats.gets.Add(1)
		if err != nil {
			errs[i] = fmt.Errorf("get %s bytes %d to %d: %w", key, r.start, r.end, err)
			return
		}
		br.stats.getBytes.Add(uint64(len(b)))
		r.data = b
	})
	return nil, errors.Join(errs...)
}
