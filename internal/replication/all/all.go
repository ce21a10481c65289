// Package all registers every replication protocol Meridian ships (package engine's
// registry). The binary, the runtime's tests and the tools import it for its side effect;
// adding a protocol means adding its package here and nowhere else.
package all

import (
	_ "meridian/internal/metadata" // the cluster metadata group's protocol
	_ "meridian/internal/replication/canopus"
	_ "meridian/internal/replication/catenae"
	_ "meridian/internal/replication/epaxos"
	_ "meridian/internal/replication/globlease"
	_ "meridian/internal/replication/meteorshower"
	_ "meridian/internal/replication/quorum"
	_ "meridian/internal/replication/raft"
)
