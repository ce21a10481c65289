// Package transport moves peer messages between nodes. Protocol cores never see it: the node
// runtime hands it the Envelopes a core's Ready holds, and feeds received Envelopes back into
// the core (DESIGN.md section 4, sans-IO protocol cores).
//
// The contract is deliberately weak, like UDP with per-link FIFO: Send never blocks and may
// drop a message (queue full, peer down); messages on one link arrive in order when they
// arrive. Protocols are built to tolerate loss (timeouts, retries, anti-entropy).
//
// Two implementations: GRPC (production and the lab: one stream per peer over real TCP) and
// WAN (in-process, each message delayed by its region pair's one-way latency — the emulated
// runtime of `meridian demo` and `meridian bench`).
package transport

import (
	"sync/atomic"

	"meridian/internal/wire/peerpb"
)

// Handler receives every message addressed to a node. It must not block for long: it runs on
// the transport's delivery goroutine.
type Handler func(env *peerpb.Envelope)

// Transport sends a node's messages to its peers.
type Transport interface {
	// Send queues env for env.To. It never blocks; it returns false when the message was
	// dropped. The transport owns env after the call.
	Send(env *peerpb.Envelope) bool
	// Stats returns counters since start.
	Stats() Stats
	// Close stops sending; queued messages are dropped.
	Close() error
}

// Stats counts a transport's traffic.
type Stats struct {
	Sent, Dropped, Received uint64
	// WireBytesSent and WireWrites count what the connections to peers wrote: bytes (with
	// HTTP/2 and gRPC framing) and write calls (each one a syscall). Zero for the emulated WAN.
	WireBytesSent, WireWrites uint64
}

type counters struct {
	sent, dropped, received atomic.Uint64
	wireBytes, wireWrites   atomic.Uint64
}

func (c *counters) stats() Stats {
	return Stats{Sent: c.sent.Load(), Dropped: c.dropped.Load(), Received: c.received.Load(),
		WireBytesSent: c.wireBytes.Load(), WireWrites: c.wireWrites.Load()}
}
