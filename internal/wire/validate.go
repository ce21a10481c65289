package wire

import (
	"bytes"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"meridian/internal/config"
	"meridian/internal/hlc"
	"meridian/internal/placement"
	"meridian/internal/wire/peerpb"
)

// PeerCheck validates messages from peers the way the gateway validates client requests,
// before a protocol core sees them (issue 12: a forged WriteRequest with a version in the
// year 2255 was applied and shadowed every later write). The transport has already
// authenticated the sending node; PeerCheck checks what the message says:
//
//   - sender and receiver are nodes of the cluster, and the sender is not this node;
//   - every keyspace and partition named exists, every key and value is within the limits,
//     and every record lies in the partition it names;
//   - records and version-bearing messages that only a replica of a partition sends come
//     from a replica of that partition; requests that only a replica can serve are
//     addressed to one;
//   - no version (a record's, or a status's write timestamp) is further ahead of the
//     receiver's clock than ε plus a margin (config Clock.MaxFutureVersion): a hybrid
//     logical clock never runs ahead of the fastest physical clock, so while clocks are
//     within ε no correct node issues such a version. Clock-service pings and pongs are not
//     checked: measuring offsets is their purpose.
//
// A rejected message is dropped (the protocols tolerate loss) and counted by Reason.
type PeerCheck struct {
	Self      uint32
	Members   func(id uint32) bool
	Placement *placement.Map
	Limits    config.Limits
	// Now is the receiver's clock; MaxFuture is ε plus the margin.
	Now       time.Time
	MaxFuture time.Duration
}

// Rejection says why a peer message was refused. Reason is a short metrics label.
type Rejection struct {
	Reason string
	Detail string
}

func (r *Rejection) Error() string {
	return fmt.Sprintf("peer message rejected (%s): %s", r.Reason, r.Detail)
}

// Reasons for rejecting a peer message (metric label values).
const (
	RejectNotMember      = "not_member"
	RejectUnknown        = "unknown_keyspace"
	RejectBadPartition   = "bad_partition"
	RejectTooLarge       = "too_large"
	RejectMalformed      = "malformed"
	RejectFutureVersion  = "future_version"
	RejectSenderReplica  = "sender_not_replica"
	RejectReceiverReplic = "receiver_not_replica"
	RejectUnknownType    = "unknown_type"
)

func reject(reason, format string, a ...any) *Rejection {
	return &Rejection{Reason: reason, Detail: fmt.Sprintf(format, a...)}
}

// maxListLen bounds the repeated fields of one message (statuses, digests, AE entries,
// scan replies): far above what correct nodes send (AE caps at 20,000 entries, scans at
// max_scan_limit), low enough to refuse a message built to exhaust memory.
const maxListLen = 1 << 20

// MaxReadChunkBytes bounds one chunk of a large read (ReadChunkRequest.length and the data of
// its reply); the keyspace option read_chunk_bytes is at most this.
const MaxReadChunkBytes = 4 << 20

// MaxScanReplyBytes bounds one replica's reply to a scan (a page): ScanRequest.max_bytes is at
// most this, and the keyspace option scan_page_bytes too.
const MaxScanReplyBytes = 4 << 20

// MaxScanWindow bounds ScanRequest.window, the pages a streaming scan's replica sends ahead
// (the keyspace option scan_window_pages is at most this).
const MaxScanWindow = 64

// scanReplyOrder checks what the coordinator's merge of scan replies relies on: the records
// are one per key in strictly ascending key order (descending for a reverse scan), and a
// truncated reply, whose last record says where the next page starts, has one.
func scanReplyOrder(r *peerpb.ScanReply) *Rejection {
	if r.Truncated && len(r.Records) == 0 {
		return reject(RejectMalformed, "truncated scan reply without records")
	}
	for i := 1; i < len(r.Records); i++ {
		c := bytes.Compare(r.Records[i-1].GetKey(), r.Records[i].GetKey())
		if (!r.Reverse && c >= 0) || (r.Reverse && c <= 0) {
			dir := "ascending"
			if r.Reverse {
				dir = "descending"
			}
			return reject(RejectMalformed, "scan reply records %d and %d are not in strictly %s key order", i-1, i, dir)
		}
	}
	return nil
}

// MaxReportedTransfers bounds one TransferReport: a node reports at most this many of the
// transfers it receives (the largest remaining first).
const MaxReportedTransfers = 4096

// Envelope validates env as received by pc.Self. It returns nil when env may be stepped.
func (pc *PeerCheck) Envelope(env *peerpb.Envelope) *Rejection {
	if env == nil || env.Msg == nil {
		return reject(RejectMalformed, "empty envelope")
	}
	if env.To != pc.Self {
		return reject(RejectMalformed, "addressed to node %d, not to this node (%d)", env.To, pc.Self)
	}
	if env.From == pc.Self || !pc.Members(env.From) {
		return reject(RejectNotMember, "sender %d is not another node of the cluster", env.From)
	}
	from := env.From
	switch m := env.Msg.(type) {
	case *peerpb.Envelope_Write:
		// From a coordinator (any node) or a read repair; applied only by replicas.
		return pc.record(m.Write.GetRecord(), noSenderCheck, from, true)
	case *peerpb.Envelope_WriteAck:
		return nil
	case *peerpb.Envelope_Read:
		r := m.Read
		return pc.keyRef(r.Keyspace, r.Key, noSenderCheck, from, true)
	case *peerpb.Envelope_ReadReply:
		r := m.ReadReply
		if r.ValueOmitted && (r.ValueSize == 0 || r.ValueSize > uint64(pc.Limits.MaxValueBytes) || r.Record == nil) {
			return reject(RejectMalformed, "read reply omits a value of %d bytes (max_value_bytes %d) or has no record", r.ValueSize, pc.Limits.MaxValueBytes)
		}
		if r.Record == nil {
			return nil
		}
		return pc.record(r.Record, senderReplica, from, false)
	case *peerpb.Envelope_ReadChunk:
		r := m.ReadChunk
		if err := pc.keyRef(r.Keyspace, r.Key, noSenderCheck, from, true); err != nil {
			return err
		}
		if err := pc.version(r.Version, true); err != nil {
			return err
		}
		if r.Length == 0 || r.Length > MaxReadChunkBytes || r.Offset+uint64(r.Length) > uint64(pc.Limits.MaxValueBytes) {
			return reject(RejectMalformed, "read chunk [%d, +%d) outside a value of at most %d bytes in chunks of at most %d", r.Offset, r.Length, pc.Limits.MaxValueBytes, MaxReadChunkBytes)
		}
		return nil
	case *peerpb.Envelope_ReadChunkReply:
		r := m.ReadChunkReply
		if len(r.Data) > MaxReadChunkBytes || r.Offset+uint64(len(r.Data)) > uint64(pc.Limits.MaxValueBytes) {
			return reject(RejectTooLarge, "read chunk reply of %d bytes at %d (chunks ≤ %d, values ≤ %d)", len(r.Data), r.Offset, MaxReadChunkBytes, pc.Limits.MaxValueBytes)
		}
		return nil
	case *peerpb.Envelope_TransferReport:
		t := m.TransferReport
		if len(t.Transfers) > MaxReportedTransfers {
			return reject(RejectTooLarge, "transfer report: %d transfers (at most %d)", len(t.Transfers), MaxReportedTransfers)
		}
		if t.IntervalMs == 0 || t.IntervalMs > 60_000 {
			return reject(RejectMalformed, "transfer report interval %d ms (want 1..60000)", t.IntervalMs)
		}
		for _, x := range t.Transfers {
			if !pc.Members(x.Source) {
				return reject(RejectMalformed, "transfer report names node %d, not a member", x.Source)
			}
			if !(x.RateBytesPerSec >= 0) || x.RateBytesPerSec > 1e15 {
				return reject(RejectMalformed, "transfer report rate %v", x.RateBytesPerSec)
			}
		}
		return nil
	case *peerpb.Envelope_Scan:
		s := m.Scan
		if s.MaxBytes > MaxScanReplyBytes {
			return reject(RejectMalformed, "scan asks for pages of %d bytes (at most %d)", s.MaxBytes, MaxScanReplyBytes)
		}
		if s.Window > MaxScanWindow {
			return reject(RejectMalformed, "scan asks for a window of %d pages (at most %d)", s.Window, MaxScanWindow)
		}
		return pc.span(s.Keyspace, s.Start, s.End, noSenderCheck, from, true)
	case *peerpb.Envelope_ScanCredit:
		// The credit names its stream by request ID only; its bounds are keys of the stream's
		// keyspace (or a key and a zero byte: where a page ended), at most the largest key any
		// keyspace may have, plus one.
		c := m.ScanCredit
		limit := max(pc.Limits.MaxKeyBytes, systemMaxKeyBytes) + 1
		if len(c.Start) > limit || len(c.End) > limit {
			return reject(RejectTooLarge, "scan credit bounds of %d and %d bytes (at most %d)", len(c.Start), len(c.End), limit)
		}
		return nil
	case *peerpb.Envelope_ScanReply:
		r := m.ScanReply
		if err := pc.records(r.Records, senderReplica, from, false); err != nil {
			return err
		}
		return scanReplyOrder(r)
	case *peerpb.Envelope_AeDigest:
		d := m.AeDigest
		return pc.span(d.Keyspace, d.Start, d.End, senderReplica, from, true)
	case *peerpb.Envelope_AeKeys:
		k := m.AeKeys
		if err := pc.span(k.Keyspace, k.Start, k.End, senderReplica, from, true); err != nil {
			return err
		}
		if len(k.Entries) > maxListLen || len(k.Buckets) > maxListLen {
			return reject(RejectTooLarge, "anti-entropy keys: %d entries", len(k.Entries))
		}
		for _, e := range k.Entries {
			if err := pc.keyLen(k.Keyspace, e.GetKey()); err != nil {
				return err
			}
			if err := pc.version(e.GetVersion(), true); err != nil {
				return err
			}
		}
		return nil
	case *peerpb.Envelope_AePull:
		p := m.AePull
		if len(p.Keys) > maxListLen {
			return reject(RejectTooLarge, "anti-entropy pull: %d keys", len(p.Keys))
		}
		for _, k := range p.Keys {
			if err := pc.keyRef(p.Keyspace, k, senderReplica, from, true); err != nil {
				return err
			}
		}
		return nil
	case *peerpb.Envelope_AePush:
		return pc.records(m.AePush.Records, senderReplica, from, true)
	case *peerpb.Envelope_Heartbeat, *peerpb.Envelope_ClockPing, *peerpb.Envelope_ClockPong,
		*peerpb.Envelope_FullStatusRequest:
		return nil
	case *peerpb.Envelope_Status:
		s := m.Status
		if err := pc.statusBatch(s.Current, from); err != nil {
			return err
		}
		if len(s.Redundant) > maxListLen {
			return reject(RejectTooLarge, "status: %d redundant batches", len(s.Redundant))
		}
		for _, b := range s.Redundant {
			if err := pc.statusBatch(b, from); err != nil {
				return err
			}
		}
		return nil
	case *peerpb.Envelope_WriteNotification:
		return pc.record(m.WriteNotification.GetRecord(), senderReplica, from, true)
	case *peerpb.Envelope_FullStatus:
		f := m.FullStatus
		if err := pc.wallClock(f.BaseStsUnixNanos); err != nil {
			return err
		}
		return pc.statusEntries(f.Entries, from)
	case *peerpb.Envelope_GlForward:
		f := m.GlForward
		if err := pc.keyRef(f.Keyspace, f.Key, noSenderCheck, from, false); err != nil {
			return err
		}
		if len(f.Value) > pc.Limits.MaxValueBytes {
			return reject(RejectTooLarge, "forwarded value of %d bytes exceeds max_value_bytes (%d)", len(f.Value), pc.Limits.MaxValueBytes)
		}
		return nil
	case *peerpb.Envelope_GlForwardReply:
		// From the key's master, or from an affiliated (non-replica) node serving a hot key
		// under a secondary lease.
		r := m.GlForwardReply
		if r.Record != nil {
			if err := pc.record(r.Record, noSenderCheck, from, false); err != nil {
				return err
			}
		}
		if err := pc.version(r.Version, false); err != nil {
			return err
		}
		return pc.table(r.Table, from)
	case *peerpb.Envelope_GlLeaseAck:
		a := m.GlLeaseAck
		return pc.keyRef(a.Keyspace, a.Key, noSenderCheck, from, false)
	case *peerpb.Envelope_GlUpdate:
		// From the key's master, or from a host replica to its affiliated (non-replica) nodes.
		return pc.record(m.GlUpdate.GetRecord(), senderReplica, from, false)
	case *peerpb.Envelope_GlUpdateAck:
		return nil
	case *peerpb.Envelope_GlCommit:
		c := m.GlCommit
		if err := pc.keyRef(c.Keyspace, c.Key, senderReplica, from, false); err != nil {
			return err
		}
		return pc.version(c.Version, true)
	case *peerpb.Envelope_GlHeartbeat:
		return pc.partVersions(m.GlHeartbeat.Parts, from)
	case *peerpb.Envelope_GlHeartbeatAck:
		a := m.GlHeartbeatAck
		if err := pc.partVersions(a.Acked, from); err != nil {
			return err
		}
		if len(a.Newer) > maxListLen {
			return reject(RejectTooLarge, "heartbeat ack: %d tables", len(a.Newer))
		}
		for _, t := range a.Newer {
			if err := pc.table(t, from); err != nil {
				return err
			}
		}
		return nil
	case *peerpb.Envelope_GlPrepare:
		p := m.GlPrepare
		return pc.glPartition(p.Keyspace, p.Partition, senderReplica, from, true)
	case *peerpb.Envelope_GlPromise:
		p := m.GlPromise
		if err := pc.glPartition(p.Keyspace, p.Partition, senderReplica, from, true); err != nil {
			return err
		}
		if err := pc.table(p.Accepted, from); err != nil {
			return err
		}
		return pc.table(p.Committed, from)
	case *peerpb.Envelope_GlAccept:
		return pc.table(m.GlAccept.GetTable(), from)
	case *peerpb.Envelope_GlAccepted:
		a := m.GlAccepted
		if err := pc.glPartition(a.Keyspace, a.Partition, senderReplica, from, true); err != nil {
			return err
		}
		return pc.table(a.Committed, from)
	case *peerpb.Envelope_GlCommitTable:
		return pc.table(m.GlCommitTable.GetTable(), from)
	case *peerpb.Envelope_GlFetch:
		f := m.GlFetch
		return pc.keyRef(f.Keyspace, f.Key, senderReplica, from, true)
	case *peerpb.Envelope_GlFetchReply:
		if m.GlFetchReply.Record == nil {
			return nil
		}
		return pc.record(m.GlFetchReply.Record, senderReplica, from, false)
	case *peerpb.Envelope_GlRevoke:
		r := m.GlRevoke
		if err := pc.glPartition(r.Keyspace, r.Partition, senderReplica, from, false); err != nil {
			return err
		}
		if len(r.Keys) > maxListLen {
			return reject(RejectTooLarge, "revoke: %d keys", len(r.Keys))
		}
		for _, k := range r.Keys {
			if err := pc.keyLen(r.Keyspace, k); err != nil {
				return err
			}
		}
		return nil
	case *peerpb.Envelope_GlRevokeAck:
		r := m.GlRevokeAck
		return pc.glPartition(r.Keyspace, r.Partition, noSenderCheck, from, false)
	case *peerpb.Envelope_Raft:
		return pc.raftMessage(m.Raft, from)
	case *peerpb.Envelope_RaftBatch:
		if len(m.RaftBatch.Messages) > maxListLen {
			return reject(RejectTooLarge, "raft batch of %d messages", len(m.RaftBatch.Messages))
		}
		for _, r := range m.RaftBatch.Messages {
			if err := pc.raftMessage(r, from); err != nil {
				return err
			}
		}
		return nil
	case *peerpb.Envelope_RaftSnapshotOffer:
		// A snapshot transfer is part of the group's protocol: between members, or nodes a
		// move has dropped from the placement that are still in the group until the change
		// that removes them commits (a leader being removed may have to catch up the voter
		// it hands over to).
		o := m.RaftSnapshotOffer
		if err := pc.groupMember(o.Keyspace, o.Partition, from); err != nil {
			return err
		}
		if len(o.SnapshotId) > maxSnapshotIDBytes || o.Size < 0 || len(o.Message) > MaxRaftMessageBytes(pc.Limits) {
			return reject(RejectMalformed, "snapshot offer: id of %d bytes, size %d, message of %d bytes", len(o.SnapshotId), o.Size, len(o.Message))
		}
		return nil
	case *peerpb.Envelope_RaftSnapshotRequest:
		r := m.RaftSnapshotRequest
		if err := pc.groupMember(r.Keyspace, r.Partition, from); err != nil {
			return err
		}
		if len(r.SnapshotId) > maxSnapshotIDBytes || r.Offset < 0 || r.Length <= 0 || r.Length > MaxSnapshotChunkBytes {
			return reject(RejectMalformed, "snapshot request: id of %d bytes, offset %d, length %d (at most %d)", len(r.SnapshotId), r.Offset, r.Length, MaxSnapshotChunkBytes)
		}
		return nil
	case *peerpb.Envelope_RaftSnapshotChunk:
		c := m.RaftSnapshotChunk
		if err := pc.groupMember(c.Keyspace, c.Partition, from); err != nil {
			return err
		}
		if len(c.SnapshotId) > maxSnapshotIDBytes || c.Offset < 0 || len(c.Data) > MaxSnapshotChunkBytes || len(c.Error) > 4096 {
			return reject(RejectMalformed, "snapshot chunk: id of %d bytes, offset %d, %d bytes", len(c.SnapshotId), c.Offset, len(c.Data))
		}
		return nil
	case *peerpb.Envelope_MoveSnapshotRequest:
		r := m.MoveSnapshotRequest
		if err := pc.span(r.Keyspace, r.Start, r.End, senderReplica, from, true); err != nil {
			return err
		}
		if len(r.SnapshotId) > maxSnapshotIDBytes || r.Length < 0 || r.Length > MaxSnapshotChunkBytes || (r.Offset >= 0 && r.Length == 0) {
			return reject(RejectMalformed, "move snapshot request: id of %d bytes, offset %d, length %d (at most %d)", len(r.SnapshotId), r.Offset, r.Length, MaxSnapshotChunkBytes)
		}
		return nil
	case *peerpb.Envelope_MoveSnapshotChunk:
		c := m.MoveSnapshotChunk
		if err := pc.span(c.Keyspace, c.Start, c.End, senderReplica, from, true); err != nil {
			return err
		}
		if len(c.SnapshotId) > maxSnapshotIDBytes || len(c.Data) > MaxSnapshotChunkBytes || len(c.Error) > 4096 || c.Size < 0 {
			return reject(RejectMalformed, "move snapshot chunk: id of %d bytes, offset %d, %d bytes", len(c.SnapshotId), c.Offset, len(c.Data))
		}
		return nil
	case *peerpb.Envelope_NodeStats:
		st := m.NodeStats
		if len(st.Partitions) > maxListLen {
			return reject(RejectTooLarge, "node stats: %d partitions", len(st.Partitions))
		}
		for _, ps := range st.Partitions {
			if len(ps.SplitKey) > pc.Limits.MaxKeyBytes || len(ps.LoadSplitKey) > pc.Limits.MaxKeyBytes || len(ps.Keyspace) > systemMaxKeyBytes || ps.Bytes < 0 {
				return reject(RejectMalformed, "node stats of %s/%d", ps.Keyspace, ps.Partition)
			}
		}
		return nil
	case *peerpb.Envelope_RaftSnapshotStored, *peerpb.Envelope_RaftSnapshotReady, *peerpb.Envelope_MoveNote:
		// A node's notes to itself never arrive from a peer.
		return reject(RejectMalformed, "a node's own snapshot note from node %d", from)
	case *peerpb.Envelope_RaftForward:
		// From any node of the cluster (one without a replica forwards its client's
		// request), to a replica, checked like a client request.
		f := m.RaftForward
		if err := pc.partition(f.Keyspace, f.Partition, noSenderCheck, from, true); err != nil {
			return err
		}
		if len(f.Key) > 0 {
			if err := pc.keyRef(f.Keyspace, f.Key, noSenderCheck, from, true); err != nil {
				return err
			}
		}
		if len(f.Value) > pc.Limits.MaxValueBytes || len(f.Start) > pc.Limits.MaxKeyBytes || len(f.End) > pc.Limits.MaxKeyBytes || len(f.Command) > MaxRaftMessageBytes(pc.Limits) {
			return reject(RejectTooLarge, "forwarded request over the limits")
		}
		if err := pc.version(f.MinVersion, false); err != nil {
			return err
		}
		return nil
	case *peerpb.Envelope_RaftForwardReply:
		r := m.RaftForwardReply
		if len(r.Value) > pc.Limits.MaxValueBytes || len(r.Result) > MaxRaftMessageBytes(pc.Limits) {
			return reject(RejectTooLarge, "forward reply of %d value bytes", len(r.Value))
		}
		if err := pc.version(r.Version, false); err != nil {
			return err
		}
		return pc.records(r.Records, senderReplica, from, false)
	case *peerpb.Envelope_RaftApplied:
		a := m.RaftApplied
		return pc.partition(a.Keyspace, a.Partition, noSenderCheck, from, false)
	case *peerpb.Envelope_RaftRemoved:
		// A node asking whether it was removed from a group is, by then, no member of it in
		// the placement: any node of the cluster may ask and answer.
		r := m.RaftRemoved
		return pc.partition(r.Keyspace, r.Partition, noSenderCheck, from, false)
	case *peerpb.Envelope_Txn:
		return pc.txnMessage(m.Txn, from)
	case *peerpb.Envelope_Catenae:
		// Between the replicas (one per region) of a catenae keyspace's one partition; the
		// engine decodes the message with its own bounded decoder.
		c := m.Catenae
		if err := pc.wholeKeyspace(c.GetKeyspace(), senderReplica, from); err != nil {
			return err
		}
		if len(c.GetMessage()) > MaxRaftMessageBytes(pc.Limits)*4 {
			return reject(RejectTooLarge, "catenae message of %d bytes", len(c.GetMessage()))
		}
		return nil
	case *peerpb.Envelope_Canopus:
		// Between the replicas of a canopus keyspace's partition (one instance each); the
		// core checks the rest (raft messages decode with etcd raft's bounds, states with
		// canopus's).
		c := m.Canopus
		if err := pc.partition(c.GetKeyspace(), c.GetPartition(), senderReplica, from, true); err != nil {
			return err
		}
		if proto.Size(c) > MaxRaftMessageBytes(pc.Limits)*4 {
			return reject(RejectTooLarge, "canopus message of %d bytes", proto.Size(c))
		}
		return nil
	case *peerpb.Envelope_Epaxos:
		// Between the replicas of an epaxos keyspace's partition; the core checks the
		// attributes (one dependency per replica) and ignores what it cannot use.
		x := m.Epaxos
		if err := pc.partition(x.GetKeyspace(), x.GetPartition(), senderReplica, from, true); err != nil {
			return err
		}
		if proto.Size(x) > MaxRaftMessageBytes(pc.Limits)*4 {
			return reject(RejectTooLarge, "epaxos message of %d bytes", proto.Size(x))
		}
		return nil
	case *peerpb.Envelope_CatenaeForward:
		// From any node of the cluster (a region's nodes without a replica), to a replica.
		f := m.CatenaeForward
		if err := pc.wholeKeyspace(f.GetKeyspace(), noSenderCheck, from); err != nil {
			return err
		}
		if proto.Size(f) > MaxRaftMessageBytes(pc.Limits) {
			return reject(RejectTooLarge, "forwarded transaction of %d bytes", proto.Size(f))
		}
		return nil
	case *peerpb.Envelope_CatenaeForwardReply:
		r := m.CatenaeForwardReply
		if len(r.GetValue()) > pc.Limits.MaxValueBytes || len(r.GetAbortKey()) > pc.Limits.MaxKeyBytes || len(r.GetError())+len(r.GetReason()) > 64<<10 {
			return reject(RejectTooLarge, "forwarded reply over the limits")
		}
		return nil
	}
	return reject(RejectUnknownType, "message type %T has no validation rule", env.Msg)
}

// txnMessage checks a message between transactional groups: votes and vote requests come
// from a replica of the partition they speak for, to a replica of the receiving partition; an
// outcome comes from a replica of a partition of the transaction to its submitter, any node.
// The engine decodes the body with its own bounded decoders.
func (pc *PeerCheck) txnMessage(t *peerpb.TxnMessage, from uint32) *Rejection {
	if t == nil || t.Body == nil {
		return reject(RejectMalformed, "empty transaction message")
	}
	if err := pc.partition(t.Keyspace, t.FromPartition, senderReplica, from, false); err != nil {
		return err
	}
	switch b := t.Body.(type) {
	case *peerpb.TxnMessage_SdurVote:
		if len(b.SdurVote) > MaxRaftMessageBytes(pc.Limits) {
			return reject(RejectTooLarge, "vote of %d bytes", len(b.SdurVote))
		}
	case *peerpb.TxnMessage_TwopcVote, *peerpb.TxnMessage_TwopcDecide, *peerpb.TxnMessage_TwopcStatus:
		if proto.Size(t) > MaxRaftMessageBytes(pc.Limits) {
			return reject(RejectTooLarge, "2PC message of %d bytes", proto.Size(t))
		}
	case *peerpb.TxnMessage_VoteRequest:
		if b.VoteRequest == nil {
			return reject(RejectMalformed, "vote request without a transaction")
		}
	case *peerpb.TxnMessage_SeqQuery, *peerpb.TxnMessage_SeqReply:
		if proto.Size(t) > MaxRaftMessageBytes(pc.Limits) {
			return reject(RejectTooLarge, "sequencer message of %d bytes", proto.Size(t))
		}
	case *peerpb.TxnMessage_Vector:
		// Published to every node of the cluster, from a replica of the partition whose log
		// holds the chain.
		if len(b.Vector.GetComponents()) > 1<<16 {
			return reject(RejectTooLarge, "snapshot vector of %d components", len(b.Vector.GetComponents()))
		}
		return nil
	case *peerpb.TxnMessage_Outcome:
		if b.Outcome.GetTxn() == nil || b.Outcome.GetTxn().GetNode() != pc.Self {
			return reject(RejectMalformed, "outcome of a transaction not submitted by node %d", pc.Self)
		}
		if len(b.Outcome.GetKey()) > pc.Limits.MaxKeyBytes || len(b.Outcome.GetReason()) > 1024 {
			return reject(RejectTooLarge, "transaction outcome over the limits")
		}
		return nil
	}
	return pc.partition(t.Keyspace, t.Partition, noSenderCheck, from, true)
}

// raftMessage checks one Raft message: between members (voters or learners) of the
// partition's group only. The Raft engine decodes it and checks that its own addressing
// matches the envelope's.
func (pc *PeerCheck) raftMessage(r *peerpb.RaftMessage, from uint32) *Rejection {
	if r == nil {
		return reject(RejectMalformed, "empty raft message")
	}
	if err := pc.groupMember(r.Keyspace, r.Partition, from); err != nil {
		return err
	}
	if limit := MaxRaftMessageBytes(pc.Limits); len(r.Message) > limit {
		return reject(RejectTooLarge, "raft message of %d bytes (limit %d)", len(r.Message), limit)
	}
	return nil
}

// MaxSnapshotChunkBytes bounds one chunk of a snapshot transfer.
const MaxSnapshotChunkBytes = 1 << 20

// maxSnapshotIDBytes bounds a snapshot's id.
const maxSnapshotIDBytes = 128

// MaxRaftMessageBytes bounds an encoded Raft message: a batch of appends of up to 1 MiB
// (the engines' MaxSizePerMsg) plus one entry that alone may exceed it (the largest key and
// value), with room for the framing.
func MaxRaftMessageBytes(l config.Limits) int { return 2<<20 + l.MaxKeyBytes + l.MaxValueBytes }

// senderRule says whether a message about a partition must come from one of its replicas.
type senderRule bool

const (
	noSenderCheck senderRule = false
	senderReplica senderRule = true
)

func (pc *PeerCheck) partition(keyspace string, id uint32, sender senderRule, from uint32, receiverReplica bool) *Rejection {
	ks, ok := pc.Placement.Keyspace(keyspace)
	if !ok {
		return reject(RejectUnknown, "unknown keyspace %q", keyspace)
	}
	p, ok := ks.Partition(id)
	if !ok {
		return reject(RejectBadPartition, "keyspace %q has no partition %d", keyspace, id)
	}
	return pc.members(p, keyspace, sender, from, receiverReplica)
}

// glPartition checks a GlobLease message's partition. A partition this node's map does not
// have is not an error where partitions split and merge: the sender may be on an older map (a
// merge retired the ID) or a newer one (a split made it), and the engine ignores what it does
// not hold (globlease gl_split.go). Membership is checked for partitions the map has.
func (pc *PeerCheck) glPartition(keyspace string, id uint32, sender senderRule, from uint32, receiverReplica bool) *Rejection {
	if ks, ok := pc.Placement.Keyspace(keyspace); ok {
		if _, known := ks.Partition(id); !known {
			if spec, ok := config.Protocol(ks.Spec.Protocol); ok && spec.Repartition {
				return nil
			}
		}
	}
	return pc.partition(keyspace, id, sender, from, receiverReplica)
}

// groupMember checks a consensus group's message: sender and receiver are members of the
// partition, or left it by a move (placement.Partition.Departed): a member the placement
// has dropped stays in the group until the configuration change that removes it commits,
// and that change may need its vote. (Raft itself ignores messages from outside its
// configuration.)
func (pc *PeerCheck) groupMember(keyspace string, id uint32, from uint32) *Rejection {
	ks, ok := pc.Placement.Keyspace(keyspace)
	if !ok {
		return reject(RejectUnknown, "unknown keyspace %q", keyspace)
	}
	p, ok := ks.Partition(id)
	if !ok {
		return reject(RejectBadPartition, "keyspace %q has no partition %d", keyspace, id)
	}
	if !p.HasMember(from) && !p.HasDeparted(from) {
		return reject(RejectSenderReplica, "node %d is not a member of %s/%d", from, keyspace, id)
	}
	if !p.HasMember(pc.Self) && !p.HasDeparted(pc.Self) {
		return reject(RejectReceiverReplic, "this node is not a member of %s/%d", keyspace, id)
	}
	return nil
}

// wholeKeyspace checks a message about a fully replicated keyspace (one partition, catenae):
// this node is its replica, and the sender too if sender says so.
func (pc *PeerCheck) wholeKeyspace(keyspace string, sender senderRule, from uint32) *Rejection {
	ks, ok := pc.Placement.Keyspace(keyspace)
	if !ok {
		return reject(RejectUnknown, "unknown keyspace %q", keyspace)
	}
	if len(ks.Partitions) != 1 {
		return reject(RejectBadPartition, "keyspace %q has %d partitions, not one", keyspace, len(ks.Partitions))
	}
	return pc.members(&ks.Partitions[0], keyspace, sender, from, true)
}

// members applies the sender and receiver rules to partition p.
func (pc *PeerCheck) members(p *placement.Partition, keyspace string, sender senderRule, from uint32, receiverReplica bool) *Rejection {
	id := p.ID
	// Learners (consensus groups' non-voting members) count as replicas here: they receive
	// and acknowledge the group's log like voters.
	if sender == senderReplica && !p.HasMember(from) {
		return reject(RejectSenderReplica, "node %d is not a replica of %s/%d", from, keyspace, id)
	}
	if receiverReplica && !p.HasMember(pc.Self) {
		return reject(RejectReceiverReplic, "this node is not a replica of %s/%d", keyspace, id)
	}
	return nil
}

// span checks a reference to the key range [start, end) (end empty: to the end of the
// keyspace): the sender and receiver rules apply to every partition of this node's map that
// overlaps it. Ranges, not partition IDs, so that nodes whose maps differ by a split or
// merge still agree.
func (pc *PeerCheck) span(keyspace string, start, end []byte, sender senderRule, from uint32, receiverReplica bool) *Rejection {
	ks, ok := pc.Placement.Keyspace(keyspace)
	if !ok {
		return reject(RejectUnknown, "unknown keyspace %q", keyspace)
	}
	if len(start) > pc.Limits.MaxKeyBytes || len(end) > pc.Limits.MaxKeyBytes {
		return reject(RejectTooLarge, "range bound longer than max_key_bytes (%d)", pc.Limits.MaxKeyBytes)
	}
	if len(end) > 0 && bytes.Compare(start, end) >= 0 {
		return reject(RejectMalformed, "empty range [%q, %q)", start, end)
	}
	for _, p := range ks.Overlapping(start, end) {
		if err := pc.members(p, keyspace, sender, from, receiverReplica); err != nil {
			return err
		}
	}
	return nil
}

// systemMaxKeyBytes bounds keys of the reserved keyspaces ("_system": catalog entries named
// after keyspaces), which do not follow the configured limits.max_key_bytes.
const systemMaxKeyBytes = 1024

func (pc *PeerCheck) keyLen(keyspace string, key []byte) *Rejection {
	if len(key) == 0 {
		return reject(RejectMalformed, "empty key")
	}
	limit := pc.Limits.MaxKeyBytes
	if len(keyspace) > 0 && keyspace[0] == '_' {
		limit = max(limit, systemMaxKeyBytes)
	}
	if len(key) > limit {
		return reject(RejectTooLarge, "key of %d bytes exceeds max_key_bytes (%d)", len(key), limit)
	}
	return nil
}

// keyRef checks a reference to a key: the sender and receiver rules apply to the partition
// that holds the key in this node's map. The partition a message names is not checked
// against the key: partitions are key ranges, and a split or merge (which keeps every key's
// replicas) may have renamed the key's partition on one side and not yet on the other.
func (pc *PeerCheck) keyRef(keyspace string, key []byte, sender senderRule, from uint32, receiverReplica bool) *Rejection {
	ks, ok := pc.Placement.Keyspace(keyspace)
	if !ok {
		return reject(RejectUnknown, "unknown keyspace %q", keyspace)
	}
	if err := pc.keyLen(keyspace, key); err != nil {
		return err
	}
	return pc.members(ks.Lookup(key), keyspace, sender, from, receiverReplica)
}

func (pc *PeerCheck) record(r *peerpb.Record, sender senderRule, from uint32, receiverReplica bool) *Rejection {
	if r == nil {
		return reject(RejectMalformed, "missing record")
	}
	if err := pc.keyRef(r.Keyspace, r.Key, sender, from, receiverReplica); err != nil {
		return err
	}
	if len(r.Value) > pc.Limits.MaxValueBytes {
		return reject(RejectTooLarge, "value of %d bytes exceeds max_value_bytes (%d)", len(r.Value), pc.Limits.MaxValueBytes)
	}
	if r.Tombstone && len(r.Value) > 0 {
		return reject(RejectMalformed, "tombstone with a value")
	}
	return pc.version(r.Version, true)
}

func (pc *PeerCheck) records(rs []*peerpb.Record, sender senderRule, from uint32, receiverReplica bool) *Rejection {
	if len(rs) > maxListLen {
		return reject(RejectTooLarge, "%d records in one message", len(rs))
	}
	for _, r := range rs {
		if err := pc.record(r, sender, from, receiverReplica); err != nil {
			return err
		}
	}
	return nil
}

// version checks a version's writer and that it is not from the future. required: the zero
// version is malformed (records); otherwise zero means "none".
func (pc *PeerCheck) version(v *peerpb.Version, required bool) *Rejection {
	hv := VersionFromPB(v)
	if hv.IsZero() {
		if required {
			return reject(RejectMalformed, "zero version")
		}
		return nil
	}
	if !pc.Members(hv.NodeID) {
		return reject(RejectMalformed, "version written by node %d, not a node of the cluster", hv.NodeID)
	}
	return pc.futureCheck(hv)
}

func (pc *PeerCheck) futureCheck(v hlc.Version) *Rejection {
	if ahead := time.Duration(v.WallNanos - pc.Now.UnixNano()); ahead > pc.MaxFuture {
		return reject(RejectFutureVersion, "version %s is %s ahead of this node's clock (at most ε + future_version_margin = %s)",
			v, ahead.Round(time.Millisecond), pc.MaxFuture)
	}
	return nil
}

// wallClock checks a sender's clock reading (a status's send time) like a version's wall.
func (pc *PeerCheck) wallClock(unixNanos int64) *Rejection {
	if ahead := time.Duration(unixNanos - pc.Now.UnixNano()); ahead > pc.MaxFuture {
		return reject(RejectFutureVersion, "timestamp is %s ahead of this node's clock (at most %s)", ahead.Round(time.Millisecond), pc.MaxFuture)
	}
	return nil
}

func (pc *PeerCheck) statusBatch(b *peerpb.StatusBatch, from uint32) *Rejection {
	if b == nil {
		return nil
	}
	if err := pc.wallClock(b.StsUnixNanos); err != nil {
		return err
	}
	return pc.statusEntries(b.Entries, from)
}

// statusEntries: a MeteorShower status lists writes the sender applied as a replica.
func (pc *PeerCheck) statusEntries(es []*peerpb.StatusEntry, from uint32) *Rejection {
	if len(es) > maxListLen {
		return reject(RejectTooLarge, "status: %d entries", len(es))
	}
	for _, e := range es {
		if err := pc.keyRef(e.Keyspace, e.Key, senderReplica, from, false); err != nil {
			return err
		}
		if err := pc.version(e.Wts, true); err != nil {
			return err
		}
	}
	return nil
}

func (pc *PeerCheck) partVersions(ps []*peerpb.GlPartVersion, from uint32) *Rejection {
	if len(ps) > maxListLen {
		return reject(RejectTooLarge, "%d partitions in one heartbeat", len(ps))
	}
	for _, p := range ps {
		if err := pc.glPartition(p.Keyspace, p.Partition, noSenderCheck, from, false); err != nil {
			return err
		}
	}
	return nil
}

// table checks a GlobLease mastership table: its partition, masters that are nodes of the
// cluster, and the proposer's clock. A master need not be a replica in this node's map: a
// table made on the other side of a replica move step (a node that has not installed it yet,
// or has) may name the move's new replica before this node knows it as a member, or its
// leaving replica after. The GlobLease engine adopts a table only once every master it names
// is a member in its own map (globlease gl_table.go, glAdopt).
func (pc *PeerCheck) table(t *peerpb.GlTable, from uint32) *Rejection {
	if t == nil {
		return nil
	}
	if err := pc.glPartition(t.Keyspace, t.Partition, noSenderCheck, from, false); err != nil {
		return err
	}
	if t.DefaultMaster != 0 && !pc.Members(t.DefaultMaster) {
		return reject(RejectMalformed, "table of %s/%d names master %d, not a node of the cluster", t.Keyspace, t.Partition, t.DefaultMaster)
	}
	if len(t.Overrides) > maxListLen || len(t.HandedOver) > maxListLen {
		return reject(RejectTooLarge, "table: %d overrides, %d handed-over homes", len(t.Overrides), len(t.HandedOver))
	}
	for _, o := range t.Overrides {
		if err := pc.keyLen(t.Keyspace, o.Key); err != nil {
			return err
		}
		if !pc.Members(o.Master) {
			return reject(RejectMalformed, "table of %s/%d names master %d, not a node of the cluster", t.Keyspace, t.Partition, o.Master)
		}
	}
	for _, h := range t.HandedOver {
		if !pc.Members(h) {
			return reject(RejectMalformed, "table of %s/%d names home %d, not a node of the cluster", t.Keyspace, t.Partition, h)
		}
	}
	return pc.version(t.Hlc, false)
}

// CarriesReplicatedWrite reports whether env asks the receiver to store a write it did not
// coordinate (replication, anti-entropy, GlobLease updates): what a node refuses while its
// disk is full.
func CarriesReplicatedWrite(env *peerpb.Envelope) bool {
	switch env.GetMsg().(type) {
	case *peerpb.Envelope_Write, *peerpb.Envelope_AePush, *peerpb.Envelope_WriteNotification, *peerpb.Envelope_GlUpdate:
		return true
	}
	return false
}
