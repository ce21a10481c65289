package globlease

import (
	"fmt"
	"time"

	"meridian/internal/wire/peerpb"
)

// describeMessage renders GlobLease's peer messages for the simulator's traces.
func describeMessage(env *peerpb.Envelope, version func(*peerpb.Version) string) (string, bool) {
	switch m := env.Msg.(type) {
	case *peerpb.Envelope_GlForward:
		f := m.GlForward
		return fmt.Sprintf("%d->%d gl_forward #%d op=%d %s=%s lease=%v hops=%d", env.From, env.To, f.RequestId, f.Op, f.Key, f.Value, f.WantLease, f.Hops), true
	case *peerpb.Envelope_GlForwardReply:
		f := m.GlForwardReply
		return fmt.Sprintf("%d->%d gl_forward_reply #%d found=%v v=%s rec=%s lease=%v redirect=%d err=%q", env.From, env.To, f.RequestId, f.Found, version(f.GetVersion()), version(f.GetRecord().GetVersion()), time.Duration(f.LeaseNanos), f.Redirect, f.ErrMsg), true
	case *peerpb.Envelope_GlUpdate:
		u := m.GlUpdate
		return fmt.Sprintf("%d->%d gl_update #%d %s=%s v=%s lease=%v committed=%v", env.From, env.To, u.WriteId, u.GetRecord().GetKey(), u.GetRecord().GetValue(), version(u.GetRecord().GetVersion()), time.Duration(u.LeaseNanos), u.Committed), true
	case *peerpb.Envelope_GlUpdateAck:
		return fmt.Sprintf("%d->%d gl_update_ack #%d lease=%v", env.From, env.To, m.GlUpdateAck.WriteId, time.Duration(m.GlUpdateAck.LeaseNanos)), true
	case *peerpb.Envelope_GlCommit:
		return fmt.Sprintf("%d->%d gl_commit %s v=%s", env.From, env.To, m.GlCommit.Key, version(m.GlCommit.GetVersion())), true
	case *peerpb.Envelope_GlLeaseAck:
		return fmt.Sprintf("%d->%d gl_lease_ack %s grant=%d accepted=%v", env.From, env.To, m.GlLeaseAck.Key, m.GlLeaseAck.GrantId, m.GlLeaseAck.Accepted), true
	case *peerpb.Envelope_GlPrepare:
		return fmt.Sprintf("%d->%d gl_prepare p%d v%d b%d.%d", env.From, env.To, m.GlPrepare.Partition, m.GlPrepare.Version, m.GlPrepare.GetBallot().GetRound(), m.GlPrepare.GetBallot().GetNode()), true
	case *peerpb.Envelope_GlPromise:
		return fmt.Sprintf("%d->%d gl_promise p%d v%d ok=%v", env.From, env.To, m.GlPromise.Partition, m.GlPromise.Version, m.GlPromise.Ok), true
	case *peerpb.Envelope_GlAccept:
		return fmt.Sprintf("%d->%d gl_accept p%d v%d %v", env.From, env.To, m.GlAccept.GetTable().GetPartition(), m.GlAccept.GetTable().GetVersion(), m.GlAccept.GetTable().GetOverrides()), true
	case *peerpb.Envelope_GlAccepted:
		return fmt.Sprintf("%d->%d gl_accepted p%d v%d ok=%v %s", env.From, env.To, m.GlAccepted.Partition, m.GlAccepted.Version, m.GlAccepted.Ok, m.GlAccepted.Reason), true
	case *peerpb.Envelope_GlHeartbeatAck:
		return fmt.Sprintf("%d->%d gl_heartbeat_ack #%d acked=%v newer=%d", env.From, env.To, m.GlHeartbeatAck.Seq, m.GlHeartbeatAck.GetAcked(), len(m.GlHeartbeatAck.GetNewer())), true
	case *peerpb.Envelope_GlCommitTable:
		return fmt.Sprintf("%d->%d gl_commit_table p%d v%d %v", env.From, env.To, m.GlCommitTable.GetTable().GetPartition(), m.GlCommitTable.GetTable().GetVersion(), m.GlCommitTable.GetTable().GetOverrides()), true
	}
	return "", false
}
