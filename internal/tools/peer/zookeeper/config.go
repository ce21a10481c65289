package zookeeper

import (
	"fmt"
	"math"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"meridian/internal/tools/peer"
	"meridian/internal/topology"
)

// Ports every server uses. Each server has its own address (a lab host or a loopback address)
// and binds every port to it alone, so the ports need not differ between servers.
const (
	ClientPort   = 2181 // clients (and the four-letter words srvr and ruok)
	QuorumPort   = 2888 // learners to the leader
	ElectionPort = 3888 // leader election
	AdminPort    = 8080 // the AdminServer (HTTP/JSON): readiness and the leader
)

// Time limits (ZooKeeper Administrator's Guide, "Minimum Configuration" and "Cluster Options").
const (
	// defaultTick is ZooKeeper's tickTime in its sample configuration (conf/zoo_sample.cfg).
	defaultTick = 2000 * time.Millisecond
	// defaultInitLimit and defaultSyncLimit are the sample configuration's limits, in ticks.
	defaultInitLimit = 10
	defaultSyncLimit = 5
)

// role is a server's place in the ensemble.
type role struct {
	id       int  // myid, unique in the ensemble
	observer bool // a non-voting learner (peerType=observer)
	rank     int  // 0 is the preferred leader, then the other voters, then the observers
}

// roles assigns each host (by index) its myid and whether it votes. Voters are taken in turns
// from the topology's regions, starting with leaderRegion (its first host is rank 0): five
// voters on three regions of three hosts are two in the leader's region, two in the next and
// one in the third, so a write's quorum (three of five) is the leader, the other voter in its
// region and the nearest other region. Every other host is an observer.
//
// ZooKeeper's leader election (FastLeaderElection) elects the voter with the highest
// (epoch, zxid, myid) that a quorum hears from; on a fresh ensemble every zxid is 0, so the
// highest myid wins. The preferred leader therefore gets the highest myid (and is started
// first, see Start), the other voters the next ones in rank order, the observers the lowest.
func roles(hosts []peer.Host, regions []string, voters int, leaderRegion string) []role {
	// Regions in turn, starting at the leader's.
	order := slices.Clone(regions)
	if i := slices.Index(order, leaderRegion); i > 0 {
		order = append(order[i:], order[:i]...)
	}
	byRegion := map[string][]int{}
	for i, h := range hosts {
		byRegion[h.Region] = append(byRegion[h.Region], i)
	}
	var ranked []int
	// Round k takes each region's k-th host; no region has more than len(hosts).
	for k := 0; k < len(hosts) && len(ranked) < len(hosts); k++ {
		for _, r := range order {
			if k < len(byRegion[r]) {
				ranked = append(ranked, byRegion[r][k])
			}
		}
	}
	out := make([]role, len(hosts))
	for rank, i := range ranked {
		out[i] = role{id: len(hosts) - rank, observer: rank >= voters, rank: rank}
	}
	return out
}

// maxRTT is the largest RTT between the hosts' regions.
func maxRTT(hosts []peer.Host, t *topology.Topology) time.Duration {
	var rtt time.Duration
	for _, a := range hosts {
		for _, b := range hosts {
			if a.Region != b.Region {
				rtt = max(rtt, t.RTT(a.Region, b.Region))
			}
		}
	}
	return rtt
}

// DefaultTiming is the ensemble's time limits for hosts on t: tickTime is ZooKeeper's 2000 ms,
// or twice the largest RTT between the hosts' regions (rounded up to 100 ms) if that is larger,
// and initLimit and syncLimit stay at the sample configuration's 10 and 5 ticks.
//
// The tick is ZooKeeper's unit of time: the leader pings every learner each half tick, a
// learner is dropped when it has not acknowledged within syncLimit ticks, and initLimit ticks
// bound a learner's connection and first synchronisation with a new leader (a few round trips
// and a snapshot). A tick of at least two RTTs keeps pings a round trip apart and gives a
// learner at least 10 RTTs to answer and 20 to join; ZooKeeper's defaults already give that up
// to a 1 s RTT (40 and 80 RTTs on gcp-meteorshower-3, whose largest RTT is 250 ms), with
// seconds of slack for JVM pauses on a machine whose two cores run nine servers.
func DefaultTiming(hosts []peer.Host, t *topology.Topology) (tick time.Duration, initLimit, syncLimit int) {
	two := 2 * maxRTT(hosts, t)
	tick = time.Duration(math.Ceil(float64(two)/float64(100*time.Millisecond))) * 100 * time.Millisecond
	return max(tick, defaultTick), defaultInitLimit, defaultSyncLimit
}

// serverDirs are one server's files under the ensemble's working directory.
type serverDirs struct {
	Root    string // o.Dir/<host>
	Data    string // dataDir: myid, snapshots and the transaction log (wiped at Start)
	Conf    string // zoo.cfg and logback.xml (rewritten at every launch)
	Cfg     string
	Logback string
	LogFile string // the JVM's stdout and stderr: ZooKeeper's log
}

func dirsOf(clusterDir, hostName string) serverDirs {
	root := filepath.Join(clusterDir, hostName)
	conf := filepath.Join(root, "conf")
	return serverDirs{
		Root:    root,
		Data:    filepath.Join(root, "data"),
		Conf:    conf,
		Cfg:     filepath.Join(conf, "zoo.cfg"),
		Logback: filepath.Join(conf, "logback.xml"),
		LogFile: filepath.Join(root, "zookeeper.log"),
	}
}

// ensembleConfig is what every server's zoo.cfg shares.
type ensembleConfig struct {
	tick                 time.Duration
	initLimit, syncLimit int
	maxClientCnxns       int
	extra                []string // appended last: later lines win
}

// maxClientCnxns bounds the connections one client address may hold to one server. In the lab
// every benchmark client of a region connects from the region's client host, one address:
// ZooKeeper's default of 60 (meant to stop one misbehaving machine) would refuse the open-loop
// pool of 256 clients per region that rate searches use. The limit stays finite.
const maxClientCnxns = 1024

// zooCfg renders hosts[i]'s zoo.cfg. Every line the lab sets is written out, with why; anything
// not here keeps ZooKeeper's default.
func zooCfg(hosts []peer.Host, rs []role, i int, dirs serverDirs, ec ensembleConfig) []byte {
	h := hosts[i]
	var b strings.Builder
	line := func(comment, kv string) {
		if comment != "" {
			fmt.Fprintf(&b, "# %s\n", comment)
		}
		b.WriteString(kv + "\n")
	}
	b.WriteString("# Generated by meridian internal/tools/peer/zookeeper; rewritten at every start.\n")
	line("ZooKeeper's unit of time; initLimit and syncLimit are in ticks (DefaultTiming: at least 2 × the largest RTT).",
		"tickTime="+strconv.FormatInt(ec.tick.Milliseconds(), 10))
	line("", "initLimit="+strconv.Itoa(ec.initLimit))
	line("", "syncLimit="+strconv.Itoa(ec.syncLimit))
	line("Snapshots and the transaction log, on the machine's one disk.", "dataDir="+dirs.Data)
	line("Clients connect to this server's own address only: servers sharing a machine's loopback must not collide.",
		"clientPort="+strconv.Itoa(ClientPort))
	line("", "clientPortAddress="+h.Addr)
	line("Every write is fsynced to the transaction log before it is acknowledged (ZooKeeper's default, written out).",
		"forceSync=yes")
	line("Observers log and snapshot what they learn too (the default), so a restarted observer recovers from disk.",
		"syncEnabled=true")
	line("Keep the 3 newest snapshots and purge older ones every hour (the Administrator's Guide: without it, snapshots and logs accumulate).",
		"autopurge.snapRetainCount=3")
	line("", "autopurge.purgeInterval=1")
	line("Connections from one client address (the region's client host in the lab).", "maxClientCnxns="+strconv.Itoa(ec.maxClientCnxns))
	line("The four-letter words a person may send to the client port (echo srvr | nc ADDR 2181).", "4lw.commands.whitelist=srvr,ruok")
	line("The AdminServer (HTTP/JSON) answers the lab's readiness and leader queries, on this server's address only.",
		"admin.enableServer=true")
	line("", "admin.serverAddress="+h.Addr)
	line("", "admin.serverPort="+strconv.Itoa(AdminPort))
	line("Zab with a quorum of one rather than the standalone server when there is a single host: one code path at every size.",
		"standaloneEnabled=false")
	line("The membership is the static list below.", "reconfigEnabled=false")
	if rs[i].observer {
		line("This server is an observer: it learns every commit (INFORM) and serves clients, but does not vote.", "peerType=observer")
	}
	b.WriteString("# The ensemble: voters, then observers (':observer'); the preferred leader has the highest id.\n")
	idx := make([]int, len(hosts))
	for k := range idx {
		idx[k] = k
	}
	slices.SortFunc(idx, func(a, c int) int { return rs[a].rank - rs[c].rank })
	for _, k := range idx {
		kind := ""
		if rs[k].observer {
			kind = ":observer"
		}
		fmt.Fprintf(&b, "server.%d=%s:%d:%d%s\n", rs[k].id, hostForConfig(hosts[k].Addr), QuorumPort, ElectionPort, kind)
	}
	for _, e := range ec.extra {
		b.WriteString(e + "\n")
	}
	return []byte(b.String())
}

// hostForConfig writes an address as zoo.cfg's server lines need it: IPv6 in brackets.
func hostForConfig(addr string) string {
	if ip := net.ParseIP(addr); ip != nil && ip.To4() == nil {
		return "[" + ip.String() + "]"
	}
	return addr
}

// myID is the content of dataDir/myid.
func myID(r role) []byte { return []byte(strconv.Itoa(r.id) + "\n") }

// logbackXML sends ZooKeeper's log to stdout (the server's log file) at INFO, as the release's
// conf/logback.xml does to its console appender: the Maven jars carry no logging
// configuration, and logback's fallback logs everything at DEBUG.
const logbackXML = `<configuration scan="false">
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder>
      <pattern>%d{ISO8601} [myid:%X{myid}] - %-5p [%t:%C{1}@%L] - %m%n</pattern>
    </encoder>
  </appender>
  <root level="INFO">
    <appender-ref ref="STDOUT"/>
  </root>
</configuration>
`

// javaArgs is the command line (after the java binary) that runs a server in the foreground, as
// bin/zkServer.sh start-foreground does, with the lab's JVM settings.
func javaArgs(zo Options, dirs serverDirs) []string {
	args := []string{
		// A fixed, modest heap: zkEnv.sh's default is 1000 MB, but nine servers share this
		// machine and the benchmark's data is megabytes. The Administrator's Guide's one rule
		// is never to let ZooKeeper swap; a heap far below the machine's memory keeps that.
		fmt.Sprintf("-Xms%dm", zo.HeapMB), fmt.Sprintf("-Xmx%dm", zo.HeapMB),
		// The serial collector: no GC threads beside the application's. On two cores shared by
		// nine JVMs, G1's (the JDK 17 default) parallel and concurrent workers compete with
		// every other server, and a heap this small with ZooKeeper's small live set makes
		// serial young collections a few milliseconds.
		"-XX:+UseSerialGC",
		// zkServer.sh kills the JVM on OutOfMemoryError (-XX:OnOutOfMemoryError='kill -9 %p').
		"-XX:+ExitOnOutOfMemoryError",
		// The lab's namespaces have IPv4 only.
		"-Djava.net.preferIPv4Stack=true",
		"-Dlogback.configurationFile=file://" + dirs.Logback,
		"-Dzookeeper.log.dir=" + dirs.Root,
	}
	args = append(args, zo.ExtraJVMArgs...)
	return append(args, "-cp", filepath.Join(zo.LibDir, "*"), "org.apache.zookeeper.server.quorum.QuorumPeerMain", dirs.Cfg)
}
