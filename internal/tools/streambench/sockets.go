package streambench

import (
	"bufio"
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// tcpConn is one established TCP connection as ss(8) shows it.
type tcpConn struct {
	Local, Peer string
	Pids        []int
	// Sent is tcp_info's bytes_acked (bytes sent and acknowledged), Received its
	// bytes_received.
	Sent, Received int64
}

// tcpSnapshot is every established connection of this network namespace, by local and peer
// address.
type tcpSnapshot map[string]tcpConn

var (
	ssPid      = regexp.MustCompile(`pid=(\d+)`)
	ssAcked    = regexp.MustCompile(`\bbytes_acked:(\d+)`)
	ssReceived = regexp.MustCompile(`\bbytes_received:(\d+)`)
)

// readTCP runs `ss -tinpH state established` (nil if ss is missing or fails: the columns
// that need it are then left out).
func readTCP(ctx context.Context) tcpSnapshot {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ss", "-tinpH", "state", "established").Output()
	if err != nil {
		return nil
	}
	return parseSS(string(out))
}

// parseSS parses ss -tinpH's output: a line per connection (Recv-Q, Send-Q, local, peer,
// users), then an indented line of tcp_info.
func parseSS(out string) tcpSnapshot {
	snap := tcpSnapshot{}
	var cur *tcpConn
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "\t") || strings.HasPrefix(line, " ") {
			if cur == nil {
				continue
			}
			if m := ssAcked.FindStringSubmatch(line); m != nil {
				cur.Sent, _ = strconv.ParseInt(m[1], 10, 64)
			}
			if m := ssReceived.FindStringSubmatch(line); m != nil {
				cur.Received, _ = strconv.ParseInt(m[1], 10, 64)
			}
			snap[cur.Local+" "+cur.Peer] = *cur
			cur = nil
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 {
			cur = nil
			continue
		}
		c := tcpConn{Local: f[2], Peer: f[3]}
		for _, m := range ssPid.FindAllStringSubmatch(line, -1) {
			if pid, err := strconv.Atoi(m[1]); err == nil {
				c.Pids = append(c.Pids, pid)
			}
		}
		cur = &c
	}
	return snap
}

// TCPBytes are a process's bytes over TCP in a phase, by the other end.
type TCPBytes struct {
	// ToClients and FromClients: on connections accepted at its client listener.
	ToClients, FromClients int64
	// ToPeers and FromPeers: on connections at its peer listener, or that it dialled to
	// another server's listeners.
	ToPeers, FromPeers int64
	// ToObjectStore and FromObjectStore: on its connections to the object store.
	ToObjectStore, FromObjectStore int64
	// Other: any other connection of the process (both directions).
	Other int64
}

// tcpRoles say which addresses are whose.
type tcpRoles struct {
	clientListen string   // the process's client listener
	peerAddrs    []string // the servers' peer and client listeners, the process's own peer listener
	objectStore  string   // host:port of the object store ("" none)
}

// tcpDelta is a process's bytes between two snapshots: connections in both count their
// growth, new ones all of theirs (connections that closed in between are lost).
func tcpDelta(a, b tcpSnapshot, pid int, r tcpRoles) TCPBytes {
	var t TCPBytes
	for k, c := range b {
		if !containsInt(c.Pids, pid) {
			continue
		}
		sent, recv := c.Sent, c.Received
		if old, ok := a[k]; ok {
			sent, recv = sent-old.Sent, recv-old.Received
		}
		switch {
		case c.Local == r.clientListen:
			t.ToClients += sent
			t.FromClients += recv
		case r.objectStore != "" && c.Peer == r.objectStore:
			t.ToObjectStore += sent
			t.FromObjectStore += recv
		case containsStr(r.peerAddrs, c.Local) || containsStr(r.peerAddrs, c.Peer):
			t.ToPeers += sent
			t.FromPeers += recv
		default:
			t.Other += sent + recv
		}
	}
	return t
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func containsStr(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
