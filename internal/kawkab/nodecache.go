package kawkab

import (
	"container/list"
	"sync"
)

// DecodedNodeCache is the number of decoded final index nodes an Index keeps (per stream):
// a search reads the peaks and a path down from one, so the nodes it visits repeat across
// searches, and decoding one (UnmarshalNode with its checks) costs tens of microseconds. A
// final node — one before the last — never changes, so a decoded one can be shared by every
// search; the last node is the Index's own, in memory. Bytes are cached by the Store's block
// cache (nodeFiles.cache); this is the decoded form above it. 0 disables it.
var DecodedNodeCache = 32

// nodeLRU is a bounded LRU of decoded final nodes, safe for concurrent searches. Its nodes
// are shared: nothing may modify them.
type nodeLRU struct {
	mu    sync.Mutex
	max   int
	ll    *list.List // of *Node, most recently used first
	byNum map[uint64]*list.Element
}

func newNodeLRU(n int) *nodeLRU {
	if n <= 0 {
		return nil
	}
	return &nodeLRU{max: n, ll: list.New(), byNum: make(map[uint64]*list.Element, n)}
}

func (c *nodeLRU) get(j uint64) *Node {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byNum[j]
	if e == nil {
		return nil
	}
	c.ll.MoveToFront(e)
	return e.Value.(*Node)
}

func (c *nodeLRU) add(nd *Node) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.byNum[nd.Number]; e != nil {
		c.ll.MoveToFront(e)
		return
	}
	c.byNum[nd.Number] = c.ll.PushFront(nd)
	for c.ll.Len() > c.max {
		e := c.ll.Back()
		c.ll.Remove(e)
		delete(c.byNum, e.Value.(*Node).Number)
	}
}
