package config

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"meridian/internal/topology"
	"meridian/internal/topology/strictyaml"
)

var (
	clusterNameRE  = regexp.MustCompile(`^[a-z0-9-]+$`)
	keyspaceNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

// explicitFn reports whether a field was given explicitly (with a non-null value) in the
// file. Validate treats a zero value as "use the default" unless it was given explicitly,
// so that `partitions: 0` is an error while an absent field gets its default.
type explicitFn func(path string) bool

func never(string) bool { return false }

// Validate fills in the defaults of zero-valued fields (node ids, clock, limits,
// anti-entropy, and each keyspace as ValidateKeyspace does) and then checks the whole
// configuration. It works on configurations built in code as well as on parsed ones, and it
// is idempotent. The first problem found is returned as an *Error naming the field path.
func (c *Cluster) Validate() error { return c.validate(never) }

func (c *Cluster) validate(explicit explicitFn) error {
	if err := validateName(c.Name); err != nil {
		return err
	}
	if c.Topology == nil {
		return errorf("topology", "required: name a built-in topology (%s), a topology file, or describe one inline with regions and rtt_ms", strings.Join(topology.BuiltinNames(), ", "))
	}
	if err := c.validateClock(explicit); err != nil {
		return err
	}
	if err := c.validateNodes(explicit); err != nil {
		return err
	}
	seen := make(map[string]int, len(c.Keyspaces))
	for i := range c.Keyspaces {
		ks := &c.Keyspaces[i]
		prefix := strictyaml.Index("keyspaces", i)
		if err := validateKeyspace(ks, c, prefix, explicit); err != nil {
			return err
		}
		if j, dup := seen[ks.Name]; dup {
			return errorf(prefix+".name", "duplicate keyspace name %q (also keyspaces[%d])", ks.Name, j)
		}
		seen[ks.Name] = i
	}
	if err := c.validateLimits(explicit); err != nil {
		return err
	}
	if err := c.validateElasticity(); err != nil {
		return err
	}
	if err := c.validateBwMan(); err != nil {
		return err
	}
	if err := c.validateNetwork(); err != nil {
		return err
	}
	if err := c.validateStreams(); err != nil {
		return err
	}
	if err := c.validateAntiEntropy(explicit); err != nil {
		return err
	}
	return c.validateMetadata()
}

func validateName(name string) error {
	switch {
	case name == "":
		return errorf("cluster", "required: the cluster's name, e.g. cluster: local-3")
	case len(name) > maxNameLen || !clusterNameRE.MatchString(name):
		return errorf("cluster", "%q is not a valid cluster name (lower-case letters, digits and '-', at most %d characters)", name, maxNameLen)
	}
	return nil
}

func (c *Cluster) validateClock(explicit explicitFn) error {
	const path = "clock.max_offset"
	if c.Clock.MaxOffset == 0 && !explicit(path) {
		c.Clock.MaxOffset = DefaultMaxOffset
	}
	if c.Clock.MaxOffset <= 0 || c.Clock.MaxOffset > MaxMaxOffset {
		return errorf(path, "must be > 0 and ≤ %s, got %s", MaxMaxOffset, c.Clock.MaxOffset)
	}
	const marginPath = "clock.future_version_margin"
	if c.Clock.FutureVersionMargin == 0 && !explicit(marginPath) {
		c.Clock.FutureVersionMargin = DefaultFutureVersionMargin
	}
	if c.Clock.FutureVersionMargin < 0 || c.Clock.FutureVersionMargin > MaxFutureVersionMargin {
		return errorf(marginPath, "must be ≥ 0 and ≤ %s, got %s", MaxFutureVersionMargin, c.Clock.FutureVersionMargin)
	}
	return nil
}

func (c *Cluster) regionList() string {
	return fmt.Sprintf("topology %s has %s", c.Topology.Name, strings.Join(c.Topology.Regions, ", "))
}

func (c *Cluster) validateNodes(explicit explicitFn) error {
	if len(c.Nodes) == 0 {
		return errorf("nodes", "required: list at least one node")
	}
	names := make(map[string]int, len(c.Nodes))
	ids := make(map[uint32]int, len(c.Nodes))
	addrs := make(map[string]string, 3*len(c.Nodes))
	for i := range c.Nodes {
		n := &c.Nodes[i]
		p := strictyaml.Index("nodes", i)
		switch {
		case n.Name == "":
			return errorf(p+".name", "required")
		case len(n.Name) > maxNameLen || !clusterNameRE.MatchString(n.Name):
			return errorf(p+".name", "%q is not a valid node name (lower-case letters, digits and '-', at most %d characters)", n.Name, maxNameLen)
		}
		if j, dup := names[n.Name]; dup {
			return errorf(p+".name", "duplicate node name %q (also nodes[%d])", n.Name, j)
		}
		names[n.Name] = i

		if n.ID == 0 {
			if explicit(p + ".id") {
				return errorf(p+".id", "must be ≥ 1")
			}
			n.ID = uint32(i + 1)
		}
		if j, dup := ids[n.ID]; dup {
			return errorf(p+".id", "node id %d is also used by nodes[%d] (%s); ids default to the position in the list, so when some nodes have explicit ids, give every node one", n.ID, j, c.Nodes[j].Name)
		}
		ids[n.ID] = i

		switch {
		case n.Region == "":
			return errorf(p+".region", "required (%s)", c.regionList())
		case !c.Topology.HasRegion(n.Region):
			return errorf(p+".region", "unknown region %q (%s)", n.Region, c.regionList())
		}

		if n.Listen == "" {
			return errorf(p+".listen", "required: the host:port of the node's client API (gRPC), e.g. 127.0.0.1:7101")
		}
		if n.PeerListen == "" {
			return errorf(p+".peer_listen", "required: the host:port where the node's peers connect for replication, e.g. 127.0.0.1:7201 (a separate listener from listen, so it can be firewalled off from clients)")
		}
		for _, f := range []struct {
			field string
			addr  *string
		}{{"listen", &n.Listen}, {"peer_listen", &n.PeerListen}, {"metrics", &n.Metrics}} {
			if *f.addr == "" {
				continue
			}
			fp := p + "." + f.field
			norm, err := checkAddr(*f.addr)
			if err != nil {
				return errorf(fp, "%v", err)
			}
			if other, dup := addrs[norm]; dup {
				return errorf(fp, "address %s is already used by %s", *f.addr, other)
			}
			addrs[norm] = fp
		}
	}
	return nil
}

// checkAddr checks a host:port address and returns it in a normal form for comparison.
func checkAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("invalid address %q: want host:port, e.g. 127.0.0.1:7101", addr)
	}
	if host == "" {
		return "", fmt.Errorf("invalid address %q: the host is missing; peers and clients dial this address, so name the host, e.g. 127.0.0.1%s", addr, addr)
	}
	if strings.ContainsAny(host, " \t\r\n") {
		return "", fmt.Errorf("invalid address %q: the host contains white space", addr)
	}
	pn, err := strconv.Atoi(port)
	if err != nil || pn < 1 || pn > 65535 {
		return "", fmt.Errorf("invalid address %q: the port must be a number from 1 to 65535", addr)
	}
	return net.JoinHostPort(strings.ToLower(host), strconv.Itoa(pn)), nil
}

func (c *Cluster) validateLimits(explicit explicitFn) error {
	l := &c.Limits
	ints := []struct {
		field    string
		v        *int
		def, max int
	}{
		{"max_key_bytes", &l.MaxKeyBytes, DefaultMaxKeyBytes, MaxMaxKeyBytes},
		{"max_value_bytes", &l.MaxValueBytes, DefaultMaxValueBytes, MaxMaxValueBytes},
		{"max_scan_limit", &l.MaxScanLimit, DefaultMaxScanLimit, MaxMaxScanLimit},
		{"max_txn_keys", &l.MaxTxnKeys, DefaultMaxTxnKeys, MaxMaxTxnKeys},
	}
	for _, f := range ints {
		path := "limits." + f.field
		if *f.v == 0 && !explicit(path) {
			*f.v = f.def
		}
		if *f.v < 1 || *f.v > f.max {
			return errorf(path, "must be between 1 and %d, got %d", f.max, *f.v)
		}
	}
	durs := []struct {
		field string
		v     *time.Duration
		def   time.Duration
	}{
		{"default_request_timeout", &l.DefaultRequestTimeout, DefaultDefaultRequestTimeout},
		{"max_request_timeout", &l.MaxRequestTimeout, DefaultMaxRequestTimeout},
	}
	for _, f := range durs {
		if *f.v == 0 && !explicit("limits."+f.field) {
			*f.v = f.def
		}
	}
	if l.MaxRequestTimeout <= 0 || l.MaxRequestTimeout > MaxMaxRequestTimeout {
		return errorf("limits.max_request_timeout", "must be > 0 and ≤ %s, got %s", MaxMaxRequestTimeout, l.MaxRequestTimeout)
	}
	if l.DefaultRequestTimeout <= 0 || l.DefaultRequestTimeout > l.MaxRequestTimeout {
		return errorf("limits.default_request_timeout", "must be > 0 and ≤ limits.max_request_timeout (%s), got %s", l.MaxRequestTimeout, l.DefaultRequestTimeout)
	}
	return nil
}

func (c *Cluster) validateMetadata() error {
	v := c.Metadata.Voters
	if len(v) == 0 {
		return nil
	}
	if len(v) > MaxMetadataVoters || len(v)%2 == 0 {
		return errorf("metadata.voters", "%d voters: want an odd number from 1 to %d (a majority must survive the loss of the others)", len(v), MaxMetadataVoters)
	}
	seen := map[string]bool{}
	for i, name := range v {
		if _, ok := c.Node(name); !ok {
			return errorf(strictyaml.Index("metadata.voters", i), "unknown node %q", name)
		}
		if seen[name] {
			return errorf(strictyaml.Index("metadata.voters", i), "node %q named twice", name)
		}
		seen[name] = true
	}
	return nil
}

// byteRate parses an optional byte rate per second ("" is 0).
func byteRate(path, v string) (float64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := humanize.ParseBytes(strings.TrimSpace(v))
	if err != nil || n == 0 {
		return 0, errorf(path, "%q is not a positive byte rate (bytes per second, e.g. 100MB)", v)
	}
	return float64(n), nil
}

func (c *Cluster) validateNetwork() error {
	n := &c.Network
	var err error
	if n.NodeBytesPerSec, err = byteRate("network.node_bandwidth", n.NodeBandwidth); err != nil {
		return err
	}
	if n.WANBytesPerSec, err = byteRate("network.wan_bandwidth", n.WANBandwidth); err != nil {
		return err
	}
	if n.ReportInterval == 0 {
		n.ReportInterval = time.Second
	}
	if n.ReportInterval < 50*time.Millisecond || n.ReportInterval > time.Minute {
		return errorf("network.report_interval", "must be between 50ms and 1m, got %s", n.ReportInterval)
	}
	return nil
}

func (c *Cluster) validateBwMan() error {
	b := &c.BwMan
	switch b.Mode {
	case "":
		b.Mode = "off"
	case "off", "static", "auto":
	default:
		return errorf("bwman.mode", "%q is not off, static or auto", b.Mode)
	}
	var err error
	if b.LinkBytesPerSec, err = byteRate("bwman.link_bandwidth", b.LinkBandwidth); err != nil {
		return err
	}
	if b.StaticBytesPerSec, err = byteRate("bwman.static_rate", b.StaticRate); err != nil {
		return err
	}
	switch {
	case b.Mode == "static" && b.StaticBytesPerSec == 0:
		return errorf("bwman.static_rate", "static mode needs the cap (e.g. static_rate: 20MB)")
	case b.Mode == "auto" && b.LinkBytesPerSec == 0:
		return errorf("bwman.link_bandwidth", "auto mode needs each node's network bandwidth (e.g. link_bandwidth: 125MB for 1 Gbit/s)")
	}
	if b.SLOP99 == 0 {
		b.SLOP99 = 100 * time.Millisecond
	}
	if b.SLOP99 < time.Millisecond || b.SLOP99 > time.Minute {
		return errorf("bwman.slo_p99", "must be between 1ms and 1m, got %s", b.SLOP99)
	}
	switch b.Policy {
	case "":
		b.Policy = "user-first"
	case "recovery-first", "user-first":
	default:
		return errorf("bwman.policy", "%q is not recovery-first or user-first", b.Policy)
	}
	if b.Period == 0 {
		b.Period = time.Second
	}
	if b.Period < 100*time.Millisecond || b.Period > time.Minute {
		return errorf("bwman.period", "must be between 100ms and 1m, got %s", b.Period)
	}
	switch {
	case b.ChunkSize != "":
		n, err := humanize.ParseBytes(strings.TrimSpace(b.ChunkSize))
		if err != nil || n < MinChunkBytes || n > MaxChunkBytes {
			return errorf("bwman.chunk_size", "%q: want a size from 4KiB to 1MiB (e.g. 64KiB)", b.ChunkSize)
		}
		b.ChunkBytes = int(n)
	case b.LinkBytesPerSec > 0:
		b.ChunkBytes = int(min(max(b.LinkBytesPerSec*b.SLOP99.Seconds()/10, 16<<10), 512<<10))
	default:
		b.ChunkBytes = 512 << 10
	}
	return nil
}

// MinChunkBytes and MaxChunkBytes bound bwman.chunk_size (the upper bound is the largest
// chunk a peer accepts, wire.MaxSnapshotChunkBytes).
const (
	MinChunkBytes = 4 << 10
	MaxChunkBytes = 1 << 20
)

func (c *Cluster) validateElasticity() error {
	e := &c.Elasticity
	switch e.Strategy {
	case "":
		e.Strategy = "two-phase"
	case "two-phase", "one-phase", "split-move":
	default:
		return errorf("elasticity.strategy", "%q is not two-phase, one-phase or split-move", e.Strategy)
	}
	if e.Interval == 0 {
		e.Interval = time.Second
	}
	if e.Interval < 10*time.Millisecond || e.Interval > time.Minute {
		return errorf("elasticity.interval", "must be between 10ms and 1m, got %s", e.Interval)
	}
	if e.DeadAfter == 0 {
		e.DeadAfter = 5 * time.Minute
	}
	if e.DeadAfter < time.Second {
		return errorf("elasticity.dead_after", "must be at least 1s, got %s", e.DeadAfter)
	}
	if e.MaxMovesPerNode == 0 {
		e.MaxMovesPerNode = 2
	}
	if e.MaxMoves == 0 {
		e.MaxMoves = 16
	}
	if e.MaxMovesPerNode < 1 || e.MaxMovesPerNode > 64 || e.MaxMoves < 1 || e.MaxMoves > 1024 {
		return errorf("elasticity.max_moves", "max_moves_per_node must be 1..64 and max_moves 1..1024, got %d and %d", e.MaxMovesPerNode, e.MaxMoves)
	}
	if e.TargetByteImbalance == 0 {
		e.TargetByteImbalance = 0.05
	}
	if e.TargetLoadImbalance == 0 {
		e.TargetLoadImbalance = 0.10
	}
	for _, t := range []struct {
		path string
		v    float64
	}{{"elasticity.target_byte_imbalance", e.TargetByteImbalance}, {"elasticity.target_load_imbalance", e.TargetLoadImbalance}} {
		if t.v != -1 && (t.v < 0.01 || t.v > 1) {
			return errorf(t.path, "must be between 0.01 and 1 (or -1: off), got %v", t.v)
		}
	}
	if e.SettleFor == 0 {
		e.SettleFor = 5 * time.Second
	}
	if e.SettleFor < 0 || e.SettleFor > time.Hour {
		return errorf("elasticity.settle_for", "must be between 0 and 1h, got %s", e.SettleFor)
	}
	if e.StalledAfter == 0 {
		e.StalledAfter = 10 * time.Minute
	}
	if e.StalledAfter < time.Minute || e.StalledAfter > 24*time.Hour {
		return errorf("elasticity.stalled_after", "must be between 1m and 24h, got %s", e.StalledAfter)
	}
	return nil
}

func (c *Cluster) validateAntiEntropy(explicit explicitFn) error {
	const path = "anti_entropy.interval"
	if c.AntiEntropy.Interval == 0 && !explicit(path) {
		c.AntiEntropy.Interval = DefaultAntiEntropyInterval
	}
	if c.AntiEntropy.Interval < MinAntiEntropyInterval {
		return errorf(path, "must be ≥ %s, got %s", MinAntiEntropyInterval, c.AntiEntropy.Interval)
	}
	return nil
}

// ValidateKeyspace fills in the defaults of a keyspace (regions: every region of the
// topology; replicas_per_region: 1; partitions: 16; protocol options: see protocols.go) and
// checks it against the cluster c: a valid, non-reserved name, a known protocol, regions of
// the topology each holding at least replicas_per_region nodes, partitions in 1..4096, and
// the protocol's options (normalised in place). It is used for the keyspaces of the
// configuration file and for keyspaces created at run time through the API. It does not
// check that the name is unused; that is the caller's business.
func ValidateKeyspace(ks *Keyspace, c *Cluster) error {
	if err := validateKeyspace(ks, c, "", never); err != nil {
		if e, ok := err.(*Error); ok && ks.Name != "" {
			e.Subject = fmt.Sprintf("keyspace %q", ks.Name)
		}
		return err
	}
	return nil
}

func validateKeyspace(ks *Keyspace, c *Cluster, prefix string, explicit explicitFn) error {
	field := func(f string) string {
		if prefix == "" {
			return f
		}
		return prefix + "." + f
	}
	if c == nil || c.Topology == nil {
		return errorf(field("regions"), "the cluster has no topology to check the keyspace against")
	}

	switch {
	case ks.Name == "":
		return errorf(field("name"), "required")
	case strings.HasPrefix(ks.Name, "_"):
		return errorf(field("name"), "%q: names starting with \"_\" are reserved for system keyspaces", ks.Name)
	case len(ks.Name) > maxKeyspaceNameLen || !keyspaceNameRE.MatchString(ks.Name):
		return errorf(field("name"), "%q is not a valid keyspace name (a lower-case letter, then lower-case letters, digits and '_', at most %d characters)", ks.Name, maxKeyspaceNameLen)
	}

	known := strings.Join(Protocols(), ", ")
	if ks.Protocol == "" {
		return errorf(field("protocol"), "required (known protocols: %s)", known)
	}
	proto, ok := Protocol(ks.Protocol)
	if !ok || (proto.Internal && !c.AllowInternal) {
		return errorf(field("protocol"), "unknown protocol %q (known protocols: %s)", ks.Protocol, known)
	}

	if ks.ReplicasPerRegion == 0 && !explicit(field("replicas_per_region")) {
		ks.ReplicasPerRegion = DefaultReplicasPerRegion
	}
	if ks.ReplicasPerRegion < 1 {
		return errorf(field("replicas_per_region"), "must be ≥ 1, got %d", ks.ReplicasPerRegion)
	}
	if proto.FullReplication && ks.ReplicasPerRegion != 1 {
		return errorf(field("replicas_per_region"), "a %s keyspace has one replica per region (each region's data center server), got %d", ks.Protocol, ks.ReplicasPerRegion)
	}

	if len(ks.Regions) == 0 {
		if explicit(field("regions")) {
			return errorf(field("regions"), "must list at least one region (omit the field to use every region of the topology)")
		}
		ks.Regions = append([]string(nil), c.Topology.Regions...)
	}
	seen := make(map[string]int, len(ks.Regions))
	for i, r := range ks.Regions {
		rp := strictyaml.Index(field("regions"), i)
		if !c.Topology.HasRegion(r) {
			return errorf(rp, "unknown region %q (%s)", r, c.regionList())
		}
		if j, dup := seen[r]; dup {
			return errorf(rp, "duplicate region %q (also regions[%d])", r, j)
		}
		seen[r] = i
	}
	for _, r := range ks.Regions {
		nodes := c.NodesInRegion(r)
		if len(nodes) < ks.ReplicasPerRegion {
			return errorf(field("replicas_per_region"), "%d replicas per region need at least %d nodes in every region of the keyspace, but region %s has %d", ks.ReplicasPerRegion, ks.ReplicasPerRegion, r, len(nodes))
		}
	}

	if len(ks.SplitPoints) > 0 {
		if len(ks.SplitPoints) >= MaxPartitions {
			return errorf(field("split_points"), "%d split points make more than %d partitions", len(ks.SplitPoints), MaxPartitions)
		}
		for i, sp := range ks.SplitPoints {
			switch {
			case sp == "":
				return errorf(strictyaml.Index(field("split_points"), i), "a split point must not be empty (the first partition starts at the empty key)")
			case len(sp) > c.Limits.MaxKeyBytes:
				return errorf(strictyaml.Index(field("split_points"), i), "split point of %d bytes exceeds max_key_bytes (%d)", len(sp), c.Limits.MaxKeyBytes)
			case i > 0 && sp <= ks.SplitPoints[i-1]:
				return errorf(strictyaml.Index(field("split_points"), i), "split points must be strictly increasing: %q follows %q", sp, ks.SplitPoints[i-1])
			}
		}
		if ks.Partitions != 0 && ks.Partitions != len(ks.SplitPoints)+1 {
			return errorf(field("partitions"), "%d split points make %d partitions, but partitions is %d (leave it out)", len(ks.SplitPoints), len(ks.SplitPoints)+1, ks.Partitions)
		}
		ks.Partitions = len(ks.SplitPoints) + 1
	}
	if proto.FullReplication {
		if ks.Partitions == 0 && !explicit(field("partitions")) {
			ks.Partitions = 1
		}
		if ks.Partitions != 1 {
			return errorf(field("partitions"), "a %s keyspace is replicated whole in every region: one partition, got %d", ks.Protocol, ks.Partitions)
		}
	}
	if ks.Partitions == 0 && !explicit(field("partitions")) {
		ks.Partitions = DefaultPartitions
	}
	if ks.Partitions < 1 || ks.Partitions > MaxPartitions {
		return errorf(field("partitions"), "must be between 1 and %d, got %d", MaxPartitions, ks.Partitions)
	}
	if ks.Protocol == ProtocolMetadata && ks.Partitions != 1 {
		return errorf(field("partitions"), "the metadata keyspace has one partition, got %d", ks.Partitions)
	}

	opts, oerr := normalizeOptions(proto, ks.Options)
	if oerr != nil {
		return errorf(strictyaml.Key(field("options"), oerr.key), "%s", oerr.msg)
	}
	ks.Options = opts
	if ks.Protocol == ProtocolRaft || ks.Protocol == ProtocolMetadata {
		o, err := RaftOptionsOf(opts)
		if err != nil {
			return errorf(field("options"), "%v", err)
		}
		if o.LeaderRegion != "" && len(ks.Regions) > 0 && !slices.Contains(ks.Regions, o.LeaderRegion) {
			return errorf(field("options"), "leader_region %q is not a region of the keyspace (regions: %s)", o.LeaderRegion, strings.Join(ks.Regions, ", "))
		}
	}
	if ks.Protocol == ProtocolGlobLease {
		// Cross-field checks (home regions among the keyspace's regions, election timeout
		// above the master lease) need the whole keyspace.
		if _, err := GlobLeaseOptionsOf(opts, ks.Regions); err != nil {
			return errorf(field("options"), "%v", err)
		}
	}
	return nil
}

// ValidateNodeName checks a node name: lower-case letters, digits and '-', at most 64
// characters (a node joining a running cluster is named on the command line).
func ValidateNodeName(name string) error {
	if name == "" || len(name) > maxNameLen || !clusterNameRE.MatchString(name) {
		return fmt.Errorf("%q is not a valid node name (lower-case letters, digits and '-', at most %d characters)", name, maxNameLen)
	}
	return nil
}
