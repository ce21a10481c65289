package wire

import "meridian/internal/wire/peerpb"

// MessageType names an envelope's message, for metrics labels, traces and test scripts.
func MessageType(env *peerpb.Envelope) string {
	switch env.GetMsg().(type) {
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
	}
	return "unknown"
}
