//go:build linux

package lab

import (
	"context"

	"meridian/internal/tools/peer"
	"meridian/internal/tools/peer/cassandra"
	"meridian/internal/tools/peer/etcd"
	"meridian/internal/tools/peer/zookeeper"
)

// The peers the lab runs beside Meridian. Each starts one node per host of its role: one per
// region by default, or as many per region as Meridian has servers (PlanOptions.PeersPerRegion).
func init() {
	peerStarters[RoleCassandra] = func(ctx context.Context, o peer.Options) (PeerCluster, error) {
		// Jars from $MERIDIAN_CASSANDRA_LIB, else scripts/fetch-cassandra.sh resolves them
		// from Maven Central into the cache (docs/peers-cassandra.md).
		return cassandra.Start(ctx, o, cassandra.Options{})
	}
	peerStarters[RoleEtcd] = func(ctx context.Context, o peer.Options) (PeerCluster, error) {
		// One voting member per host (etcd 3.4's learners refuse writes and linearizable
		// reads, so every member that serves clients votes); the leader is moved to the
		// topology's first region so runs are comparable (etcd's costs depend on where its
		// leader is).
		return etcd.Start(ctx, o, etcd.Options{})
	}
	peerStarters[RoleZooKeeper] = func(ctx context.Context, o peer.Options) (PeerCluster, error) {
		// Five voters spread over the regions and observers on the other hosts, as the Canopus
		// thesis ran it; the leader is biased to the topology's first region, as etcd's is
		// moved there. Jars from $MERIDIAN_ZOOKEEPER_LIB, else scripts/fetch-zookeeper.sh
		// (docs/peers-zookeeper.md).
		return zookeeper.Start(ctx, o, zookeeper.Options{})
	}
}
