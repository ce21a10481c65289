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
	}
	return "unknown"
}
