// Package server is the gateway of DESIGN.md section 4: it validates client requests, turns
// them into protocol requests for the node's coordinator, and maps results to gRPC statuses.
// It also assembles a server process (gRPC for clients and peers, Prometheus metrics).
package server

import (
	"bytes"
	"slices"
	"strings"
	"time"

	"meridian/api/meridianpb"
	"meridian/internal/config"
	"meridian/internal/engine"
	"meridian/internal/errs"
	"meridian/internal/hlc"
	"meridian/internal/placement"
)

// DefaultScanLimit applies when a scan names no limit.
const DefaultScanLimit = 1000

// maxSessionAhead bounds how far a client's session version may be ahead of the node's
// clock. A session version comes from another coordinator's clock; within the clock bound it
// is a few milliseconds ahead at most. Far beyond means a broken client or clock, and
// adopting it would drag this node's clock into the future.
const maxSessionAhead = time.Minute

// validator checks requests against the cluster's limits and the current placement map.
type validator struct {
	limits config.Limits
	pmap   *placement.Map
	now    time.Time
}

func (v validator) keyspace(name string) (*placement.Keyspace, error) {
	if name == "" {
		return nil, errs.New(errs.Invalid, "keyspace name is empty")
	}
	if strings.HasPrefix(name, "_") {
		return nil, errs.New(errs.Invalid, "keyspace %q is reserved for Meridian's own metadata", name)
	}
	ks, ok := v.pmap.Keyspace(name)
	if !ok {
		return nil, errs.New(errs.NotFound, "unknown keyspace %q", name)
	}
	return ks, nil
}

func (v validator) key(key []byte, what string) error {
	if len(key) == 0 {
		return errs.New(errs.Invalid, "%s is empty", what)
	}
	if len(key) > v.limits.MaxKeyBytes {
		return errs.New(errs.Invalid, "%s is %d bytes, limit is %d (limits.max_key_bytes)", what, len(key), v.limits.MaxKeyBytes)
	}
	return nil
}

func (v validator) deadline(timeoutMs uint32) (time.Time, error) {
	if timeoutMs == 0 {
		return v.now.Add(v.limits.DefaultRequestTimeout), nil
	}
	d := time.Duration(timeoutMs) * time.Millisecond
	if d > v.limits.MaxRequestTimeout {
		return time.Time{}, errs.New(errs.Invalid, "timeout %v exceeds the limit %v (limits.max_request_timeout)", d, v.limits.MaxRequestTimeout)
	}
	return v.now.Add(d), nil
}

// point validates the fields every single-key operation shares, in the order clients see
// their errors: keyspace, key, then (extra) the operation's own fields, the protocol's
// fields (engine.CheckRequest: write mode, level), deadline, session.
func (v validator) point(op engine.Op, keyspace string, key []byte, extra func(ks *placement.Keyspace) error, consistency, writeMode string,
	timeoutMs uint32, session *meridianpb.Version) (engine.Request, error) {
	ks, err := v.keyspace(keyspace)
	if err != nil {
		return engine.Request{}, err
	}
	if err := v.key(key, "key"); err != nil {
		return engine.Request{}, err
	}
	if extra != nil {
		if err := extra(ks); err != nil {
			return engine.Request{}, err
		}
	}
	req := engine.Request{Op: op, Keyspace: ks.Spec.Name, Key: key, WriteMode: writeMode}
	if err := engine.CheckRequest(ks, &req, consistency); err != nil {
		return engine.Request{}, err
	}
	dl, err := v.deadline(timeoutMs)
	if err != nil {
		return engine.Request{}, err
	}
	sv, err := v.session(session)
	if err != nil {
		return engine.Request{}, err
	}
	req.Deadline, req.MinVersion = dl, sv
	return req, nil
}

func (v validator) get(r *meridianpb.GetRequest) (engine.Request, error) {
	return v.point(engine.OpGet, r.GetKeyspace(), r.GetKey(), nil, r.GetConsistency(), "", r.GetTimeoutMs(), r.GetSessionVersion())
}

func (v validator) put(r *meridianpb.PutRequest) (engine.Request, error) {
	check := func(ks *placement.Keyspace) error {
		if len(r.GetValue()) > v.limits.MaxValueBytes {
			return errs.New(errs.Invalid, "value is %d bytes, limit is %d (limits.max_value_bytes)", len(r.GetValue()), v.limits.MaxValueBytes)
		}
		return nil
	}
	req, err := v.point(engine.OpPut, r.GetKeyspace(), r.GetKey(), check, r.GetConsistency(), r.GetWriteMode(), r.GetTimeoutMs(), r.GetSessionVersion())
	if err != nil {
		return req, err
	}
	req.Value = r.GetValue()
	if req.Value == nil {
		req.Value = []byte{} // an empty value is a value, not a tombstone
	}
	return req, nil
}

func (v validator) del(r *meridianpb.DeleteRequest) (engine.Request, error) {
	return v.point(engine.OpDelete, r.GetKeyspace(), r.GetKey(), nil, r.GetConsistency(), r.GetWriteMode(), r.GetTimeoutMs(), r.GetSessionVersion())
}

// moveMaster validates a request to move a key's master: keyspace (of a protocol with
// masters, engine.CheckRequest), key, region (one of the keyspace's), deadline.
func (v validator) moveMaster(r *meridianpb.MoveMasterRequest) (engine.Request, error) {
	ks, err := v.keyspace(r.GetKeyspace())
	if err != nil {
		return engine.Request{}, err
	}
	probe := engine.Request{Op: engine.OpMoveMaster, Keyspace: ks.Spec.Name}
	if err := engine.CheckRequest(ks, &probe, ""); err != nil {
		return engine.Request{}, err
	}
	if err := v.key(r.GetKey(), "key"); err != nil {
		return engine.Request{}, err
	}
	if r.GetRegion() == "" {
		return engine.Request{}, errs.New(errs.Invalid, "move master: region is empty; keyspace %q has regions %s", ks.Spec.Name, strings.Join(ks.Spec.Regions, ", "))
	}
	if !slices.Contains(ks.Spec.Regions, r.GetRegion()) {
		return engine.Request{}, errs.New(errs.Invalid, "move master: %q is not a region of keyspace %q (regions: %s)", r.GetRegion(), ks.Spec.Name, strings.Join(ks.Spec.Regions, ", "))
	}
	dl, err := v.deadline(r.GetTimeoutMs())
	if err != nil {
		return engine.Request{}, err
	}
	return engine.Request{Op: engine.OpMoveMaster, Keyspace: ks.Spec.Name, Key: r.GetKey(), Region: r.GetRegion(), Deadline: dl}, nil
}

func (v validator) scan(r *meridianpb.ScanRequest) (engine.Request, error) {
	ks, err := v.keyspace(r.GetKeyspace())
	if err != nil {
		return engine.Request{}, err
	}
	if len(r.GetStart()) > v.limits.MaxKeyBytes {
		return engine.Request{}, errs.New(errs.Invalid, "scan start is %d bytes, limit is %d (limits.max_key_bytes)", len(r.GetStart()), v.limits.MaxKeyBytes)
	}
	if len(r.GetEnd()) > v.limits.MaxKeyBytes {
		return engine.Request{}, errs.New(errs.Invalid, "scan end is %d bytes, limit is %d (limits.max_key_bytes)", len(r.GetEnd()), v.limits.MaxKeyBytes)
	}
	if len(r.GetEnd()) > 0 && bytes.Compare(r.GetStart(), r.GetEnd()) >= 0 {
		return engine.Request{}, errs.New(errs.Invalid, "scan range is empty: start %q is not before end %q", r.GetStart(), r.GetEnd())
	}
	// Compare in uint64 before converting, so a huge limit cannot wrap on 32-bit platforms.
	if uint64(r.GetLimit()) > uint64(v.limits.MaxScanLimit) {
		return engine.Request{}, errs.New(errs.Invalid, "scan limit %d exceeds the limit %d (limits.max_scan_limit)", r.GetLimit(), v.limits.MaxScanLimit)
	}
	limit := int(r.GetLimit())
	if limit == 0 {
		limit = min(DefaultScanLimit, v.limits.MaxScanLimit)
	}
	start := r.GetStart()
	if start == nil {
		start = []byte{}
	}
	req := engine.Request{Op: engine.OpScan, Keyspace: ks.Spec.Name, Start: start, End: r.GetEnd(), Limit: limit}
	if err := engine.CheckRequest(ks, &req, r.GetConsistency()); err != nil {
		return engine.Request{}, err
	}
	dl, err := v.deadline(r.GetTimeoutMs())
	if err != nil {
		return engine.Request{}, err
	}
	req.Deadline = dl
	return req, nil
}

func (v validator) session(sv *meridianpb.Version) (hlc.Version, error) {
	if sv == nil {
		return hlc.Version{}, nil
	}
	ver := hlc.Version{WallNanos: sv.GetWallNanos(), Logical: sv.GetLogical(), NodeID: sv.GetNodeId()}
	if ver.WallNanos > v.now.Add(maxSessionAhead).UnixNano() {
		return hlc.Version{}, errs.New(errs.Invalid, "session version %s is more than %v ahead of this node's clock", ver, maxSessionAhead)
	}
	return ver, nil
}

func versionPB(v hlc.Version) *meridianpb.Version {
	if v.IsZero() {
		return nil
	}
	return &meridianpb.Version{WallNanos: v.WallNanos, Logical: v.Logical, NodeId: v.NodeID}
}
