package wire

import (
	"meridian/internal/wire/peerpb"
)

// MessageType names an envelope's message, for metrics labels, traces and test scripts.
// IsSystemTraffic reports whether env is system traffic (BwMan's system class: data moved for
// replica moves and Raft snapshots, and anti-entropy), not client requests and their
// replication.
func IsSystemTraffic(env *peerpb.Envelope) bool {
	switch env.GetMsg().(type) {
	case *peerpb.Envelope_MoveSnapshotChunk, *peerpb.Envelope_RaftSnapshotChunk,
		*peerpb.Envelope_AeDigest, *peerpb.Envelope_AeKeys, *peerpb.Envelope_AePull, *peerpb.Envelope_AePush,
		*peerpb.Envelope_FullStatus:
		return true
	}
	return false
}

func MessageType(env *peerpb.Envelope) string {
	switch env.GetMsg().(type) {
	case *peerpb.Envelope_Raft:
		return "raft"
	case *peerpb.Envelope_Write:
		return "write"
	case *peerpb.Envelope_WriteAck:
		return "write_ack"
	case *peerpb.Envelope_Read:
		return "read"
	case *peerpb.Envelope_ReadReply:
		return "read_reply"
	case *peerpb.Envelope_Scan:
		return "scan"
	case *peerpb.Envelope_ScanReply:
		return "scan_reply"
	case *peerpb.Envelope_ScanCredit:
		return "scan_credit"
	case *peerpb.Envelope_AeDigest:
		return "ae_digest"
	case *peerpb.Envelope_AeKeys:
		return "ae_keys"
	case *peerpb.Envelope_AePull:
		return "ae_pull"
	case *peerpb.Envelope_AePush:
		return "ae_push"
	case *peerpb.Envelope_Heartbeat:
		return "heartbeat"
	case *peerpb.Envelope_Status:
		return "status"
	case *peerpb.Envelope_WriteNotification:
		return "write_notification"
	case *peerpb.Envelope_FullStatusRequest:
		return "full_status_request"
	case *peerpb.Envelope_FullStatus:
		return "full_status"
	case *peerpb.Envelope_ClockPing:
		return "clock_ping"
	case *peerpb.Envelope_ClockPong:
		return "clock_pong"
	case *peerpb.Envelope_GlForward:
		return "gl_forward"
	case *peerpb.Envelope_GlForwardReply:
		return "gl_forward_reply"
	case *peerpb.Envelope_GlLeaseAck:
		return "gl_lease_ack"
	case *peerpb.Envelope_GlUpdate:
		return "gl_update"
	case *peerpb.Envelope_GlUpdateAck:
		return "gl_update_ack"
	case *peerpb.Envelope_GlCommit:
		return "gl_commit"
	case *peerpb.Envelope_GlHeartbeat:
		return "gl_heartbeat"
	case *peerpb.Envelope_GlHeartbeatAck:
		return "gl_heartbeat_ack"
	case *peerpb.Envelope_GlPrepare:
		return "gl_prepare"
	case *peerpb.Envelope_GlPromise:
		return "gl_promise"
	case *peerpb.Envelope_GlAccept:
		return "gl_accept"
	case *peerpb.Envelope_GlAccepted:
		return "gl_accepted"
	case *peerpb.Envelope_GlCommitTable:
		return "gl_commit_table"
	case *peerpb.Envelope_GlFetch:
		return "gl_fetch"
	case *peerpb.Envelope_GlFetchReply:
		return "gl_fetch_reply"
	case *peerpb.Envelope_GlRevoke:
		return "gl_revoke"
	case *peerpb.Envelope_GlRevokeAck:
		return "gl_revoke_ack"
	case *peerpb.Envelope_RaftBatch:
		return "raft_batch"
	case *peerpb.Envelope_RaftSnapshotOffer:
		return "raft_snapshot_offer"
	case *peerpb.Envelope_RaftSnapshotRequest:
		return "raft_snapshot_request"
	case *peerpb.Envelope_RaftSnapshotChunk:
		return "raft_snapshot_chunk"
	case *peerpb.Envelope_RaftSnapshotStored:
		return "raft_snapshot_stored"
	case *peerpb.Envelope_RaftSnapshotReady:
		return "raft_snapshot_ready"
	case *peerpb.Envelope_RaftForward:
		return "raft_forward"
	case *peerpb.Envelope_RaftForwardReply:
		return "raft_forward_reply"
	case *peerpb.Envelope_RaftApplied:
		return "raft_applied"
	case *peerpb.Envelope_RaftRemoved:
		return "raft_removed"
	case *peerpb.Envelope_Txn:
		return "txn"
	}
	return "unknown"
}

// KeyspaceOf returns the keyspace a message is about, for messages that name exactly one
// (requests, records, a single Raft message, snapshot transfers, forwards). Replies and
// acknowledgements answer a message that named it; batches and statuses may span several.
func KeyspaceOf(env *peerpb.Envelope) (string, bool) {
	switch m := env.GetMsg().(type) {
	case *peerpb.Envelope_Write:
		return m.Write.GetRecord().GetKeyspace(), true
	case *peerpb.Envelope_Read:
		return m.Read.GetKeyspace(), true
	case *peerpb.Envelope_Scan:
		return m.Scan.GetKeyspace(), true
	case *peerpb.Envelope_AeDigest:
		return m.AeDigest.GetKeyspace(), true
	case *peerpb.Envelope_AeKeys:
		return m.AeKeys.GetKeyspace(), true
	case *peerpb.Envelope_AePull:
		return m.AePull.GetKeyspace(), true
	case *peerpb.Envelope_MoveSnapshotRequest:
		return m.MoveSnapshotRequest.GetKeyspace(), true
	case *peerpb.Envelope_MoveSnapshotChunk:
		return m.MoveSnapshotChunk.GetKeyspace(), true
	case *peerpb.Envelope_GlForward:
		return m.GlForward.GetKeyspace(), true
	case *peerpb.Envelope_GlUpdate:
		return m.GlUpdate.GetRecord().GetKeyspace(), true
	case *peerpb.Envelope_GlCommit:
		return m.GlCommit.GetKeyspace(), true
	case *peerpb.Envelope_GlLeaseAck:
		return m.GlLeaseAck.GetKeyspace(), true
	case *peerpb.Envelope_Raft:
		return m.Raft.GetKeyspace(), true
	case *peerpb.Envelope_RaftSnapshotOffer:
		return m.RaftSnapshotOffer.GetKeyspace(), true
	case *peerpb.Envelope_RaftSnapshotRequest:
		return m.RaftSnapshotRequest.GetKeyspace(), true
	case *peerpb.Envelope_RaftSnapshotChunk:
		return m.RaftSnapshotChunk.GetKeyspace(), true
	case *peerpb.Envelope_RaftForward:
		return m.RaftForward.GetKeyspace(), true
	case *peerpb.Envelope_Txn:
		return m.Txn.GetKeyspace(), true
	case *peerpb.Envelope_Catenae:
		return m.Catenae.GetKeyspace(), true
	case *peerpb.Envelope_CatenaeForward:
		return m.CatenaeForward.GetKeyspace(), true
	}
	return "", false
}
