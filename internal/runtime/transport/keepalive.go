package transport

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Keepalive: both of a node's listeners and every connection to them must agree, or the
// server answers pings with GOAWAY "too_many_pings" and drops the connection (issue 12: the
// peer transport pinged every 10 s while the server kept grpc-go's default policy, which
// allows one ping every 5 minutes).
//
//   - Clients (the Go client, the peer transport) ping after KeepaliveTime of silence and
//     give up after KeepaliveTimeout without an answer, so a paused or cut-off node is
//     noticed within about 15 s even by a call that waits longer.
//   - Servers accept pings every MinPingInterval or more rarely, with or without calls in
//     flight. grpc-go never lets a client ping more often than every 10 s, so any client
//     agrees with it.
const (
	KeepaliveTime    = 10 * time.Second
	KeepaliveTimeout = 5 * time.Second
	MinPingInterval  = 5 * time.Second
	// serverPingTime: the server pings a client connection idle this long, and closes it
	// after KeepaliveTimeout without an answer (a client host that vanished).
	serverPingTime = 30 * time.Second
)

// PeerKeepaliveParams are the peer transport's client keepalive parameters.
var PeerKeepaliveParams = keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout}

// ServerKeepaliveEnforcement is the ping policy of every Meridian gRPC server.
var ServerKeepaliveEnforcement = keepalive.EnforcementPolicy{MinTime: MinPingInterval, PermitWithoutStream: true}

// ServerKeepaliveOptions are the keepalive options of every Meridian gRPC server (client API
// and peer service).
func ServerKeepaliveOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(ServerKeepaliveEnforcement),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: serverPingTime, Timeout: KeepaliveTimeout}),
	}
}
