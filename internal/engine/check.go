package engine

import (
	"meridian/internal/config"
	"meridian/internal/errs"
	"meridian/internal/placement"
)

// CheckRequest runs the protocol-specific validation of req (Protocol.Check, DefaultCheck
// when the protocol has none) for a request on keyspace ks.
func CheckRequest(ks *placement.Keyspace, req *Request, level string) error {
	p, ok := Lookup(ks.Spec.Protocol)
	if !ok {
		return errs.New(errs.Invalid, "keyspace %q uses protocol %q, which this build does not have (protocols: %v)", ks.Spec.Name, ks.Spec.Protocol, Names())
	}
	if p.Check != nil {
		return p.Check(ks, req, level)
	}
	return DefaultCheck(ks, req, level)
}

// DefaultCheck is the validation of a protocol with the quorum levels (ONE, QUORUM, ALL,
// LOCAL_ONE, LOCAL_QUORUM), no write modes and no masters to move.
func DefaultCheck(ks *placement.Keyspace, req *Request, level string) error {
	if req.Op == OpMoveMaster {
		return errs.New(errs.Invalid, "keyspace %q uses protocol %s, which has no masters to move", ks.Spec.Name, ks.Spec.Protocol)
	}
	if req.WriteMode != "" {
		return errs.New(errs.Invalid, "write_mode %q is not valid for keyspace %q: protocol %s has no write modes", req.WriteMode, ks.Spec.Name, ks.Spec.Protocol)
	}
	l, err := ParseLevel(ks, level)
	if err != nil {
		return err
	}
	req.Level = l
	return nil
}

// ParseLevel parses a client's consistency level for keyspace ks ("" is the keyspace's
// default and stays ""). LOCAL_* levels also need replicas in the coordinator's region; the
// engine checks that against the partition, because it knows its own region.
func ParseLevel(ks *placement.Keyspace, level string) (config.Level, error) {
	if level == "" {
		return "", nil
	}
	l, err := config.ParseLevel(level)
	if err != nil {
		return "", errs.New(errs.Invalid, "consistency %q is not valid for keyspace %q (protocol %s): %v", level, ks.Spec.Name, ks.Spec.Protocol, err)
	}
	return l, nil
}
