package engine

import "time"

// Forwards remembers the requests other nodes forwarded to this one (by origin node and the
// origin's request ID) for ForwardMemory, at most MaxForwardMemory of them, so that a
// duplicated forward message is not run twice (a commit or a write run twice would apply
// twice). The engines that forward (Raft, Catenae) keep one each. The zero value is ready.
type Forwards struct {
	seen  map[ForwardKey]time.Time
	order []ForwardKey
}

// ForwardKey names a forwarded request by its origin.
type ForwardKey struct {
	Node uint32
	ID   uint64
}

// ForwardMemory and MaxForwardMemory bound what Forwards remembers.
const (
	ForwardMemory    = 2 * time.Minute
	MaxForwardMemory = 200_000
)

// Seen reports whether the forward k was taken before, and remembers it (at now).
func (f *Forwards) Seen(now time.Time, k ForwardKey) bool {
	if f.seen == nil {
		f.seen = map[ForwardKey]time.Time{}
	}
	for len(f.order) > 0 && (len(f.order) > MaxForwardMemory || now.Sub(f.seen[f.order[0]]) > ForwardMemory) {
		delete(f.seen, f.order[0])
		f.order = f.order[1:]
	}
	if _, ok := f.seen[k]; ok {
		return true
	}
	f.seen[k] = now
	f.order = append(f.order, k)
	return false
}
