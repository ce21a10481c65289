//go:build linux

package lab

import (
	"context"

	"meridian/internal/tools/peer"
	"meridian/internal/tools/peer/cassandra"
	"meridian/internal/tools/peer/etcd"
)

// The peers the lab runs beside Meridian. Each starts one node per region on its own hosts.
func init() {
	peerStarters[RoleCassandra] = func(ctx context.Context, o peer.Options) (PeerCluster, error) {
		// Jars from $MERIDIAN_CASSANDRA_LIB, else scripts/fetch-cassandra.sh resolves them
		// from Maven Central into the cache (docs/peers-cassandra.md).
		return cassandra.Start(ctx, o, cassandra.Options{})
	}
	peerStarters[RoleEtcd] = func(ctx context.Context, o peer.Options) (PeerCluster, error) {
		// One member per region; the leader is moved to the topology's first region so runs
		// are comparable (etcd's costs depend on where its leader is).
		return etcd.Start(ctx, o, etcd.Options{})
	}
}
