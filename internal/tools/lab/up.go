//go:build linux

package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"meridian/internal/tools/lab/wan"
	"meridian/internal/topology"
)

// DefaultDir is the lab's state directory. One lab runs per machine: the addresses and
// namespace names are fixed.
const DefaultDir = "/tmp/meridian-lab"

// UpOptions bring a lab up.
type UpOptions struct {
	Dir               string
	Topology          *topology.Topology
	MeridianPerRegion int
	Peers             []string
	// PeersPerRegion is each peer's hosts per region (0: one; PlanOptions.PeersPerRegion).
	PeersPerRegion int
	// Exe is the meridian binary the router and servers run (default: this process's).
	Exe string
	// Seed makes the router's jitter and loss reproducible.
	Seed uint64
	Log  io.Writer
}

func (o *UpOptions) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

func exePath(exe string) (string, error) {
	if exe != "" {
		return exe, nil
	}
	p, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("lab: own executable: %w", err)
	}
	return p, nil
}

// Up creates the hosts' namespaces and starts the WAN router. A lab left over from an
// earlier run (its state or its namespaces) is torn down first.
func Up(ctx context.Context, o UpOptions) (*State, error) {
	if err := CheckPrivileges(); err != nil {
		return nil, err
	}
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	exe, err := exePath(o.Exe)
	if err != nil {
		return nil, err
	}
	layout, err := Plan(PlanOptions{Topology: o.Topology, MeridianPerRegion: o.MeridianPerRegion, Peers: o.Peers, PeersPerRegion: o.PeersPerRegion})
	if err != nil {
		return nil, err
	}
	if left, _ := listNetns(); len(left) > 0 {
		o.logf("lab: removing %d namespaces left by an earlier lab", len(left))
	}
	st := &State{Layout: layout}
	if err := bringUp(ctx, o.Dir, exe, o.Seed, st); err != nil {
		return nil, err
	}
	o.logf("lab: up in %s: %d hosts on topology %s, router pid %d", o.Dir, len(layout.Hosts), layout.Topology.Name, st.RouterPid)
	return st, nil
}

// bringUp tears down an earlier lab in dir, creates the namespaces of st's hosts, saves st
// and starts the router; on an error it leaves nothing behind.
func bringUp(ctx context.Context, dir, exe string, seed uint64, st *State) error {
	if err := Down(ctx, dir, nil); err != nil {
		return fmt.Errorf("lab: clean up the earlier lab first: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = Down(context.Background(), dir, nil)
		}
	}()
	for _, h := range st.Layout.Hosts {
		if err := createNetns(ctx, h.Netns); err != nil {
			return err
		}
	}
	if err := st.Save(dir); err != nil {
		return err
	}
	if err := startRouter(ctx, dir, exe, seed, st); err != nil {
		return err
	}
	ok = true
	return nil
}

// startRouter starts the router daemon for the hosts of st (saved in dir), records its pid
// in the state, and waits until it answers with every host.
func startRouter(ctx context.Context, dir, exe string, seed uint64, st *State) error {
	logf, err := os.OpenFile(filepath.Join(dir, "logs", "router.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("lab: router log: %w", err)
	}
	defer logf.Close()
	// The router outlives this command (lab up returns; lab down stops it), so it runs in a
	// session of its own, not tied to this process's context.
	// At the highest nice priority: every packet of every system under test waits for the
	// router, and the machine's two cores are shared with those systems.
	cmd := exec.Command("nice", "-n", "-20", exe, "lab", "router", "--dir", dir, "--seed", fmt.Sprint(seed))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("lab: start router: %w", err)
	}
	st.RouterPid = cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := st.Save(dir); err != nil {
		return err
	}
	c := wan.NewClient(RouterSocket(dir))
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := c.Status(ctx)
		if err == nil && len(s.Hosts) == len(st.Layout.Hosts) {
			break
		}
		select {
		case werr := <-exited:
			return fmt.Errorf("lab: router exited at start (%v): %s", werr, tail(filepath.Join(dir, "logs", "router.log"), 10))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lab: router not ready after 30s: %s", tail(filepath.Join(dir, "logs", "router.log"), 10))
		}
	}
	return nil
}

// Down stops every lab process and removes every lab namespace (and with them the TUN
// devices). It is idempotent: with no lab up it does nothing. Logs stay in DIR/logs.
func Down(ctx context.Context, dir string, log io.Writer) error {
	if dir == "" {
		dir = DefaultDir
	}
	var errs []error
	if st, err := LoadState(dir); err == nil {
		var pids []int
		if st.Meridian != nil {
			for _, pid := range st.Meridian.Pids {
				pids = append(pids, pid)
			}
		}
		if st.RouterPid > 0 && isRouter(st.RouterPid) {
			pids = append(pids, st.RouterPid)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		waitGone(pids, 10*time.Second)
	}
	names, err := listNetns()
	if err != nil {
		errs = append(errs, err)
	}
	for _, n := range names {
		if err := deleteNetns(ctx, n); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range []string{statePath(dir), RouterSocket(dir), filepath.Join(dir, "meridian"), filepath.Join(dir, "peers")} {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	if log != nil && len(names) > 0 {
		fmt.Fprintf(log, "lab: down: removed %d namespaces\n", len(names))
	}
	return errors.Join(errs...)
}

// isRouter reports whether pid is (still) a lab router, so that Down never kills an
// unrelated process that reused the pid.
func isRouter(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), "lab\x00router")
}

// RunRouter is the router daemon (`meridian lab router`): it creates each host's TUN device,
// moves it into the host's namespace with the host's address, and forwards packets under
// the topology's delays until ctx is done. The devices disappear when it exits.
func RunRouter(ctx context.Context, dir string, seed uint64, log *slog.Logger) error {
	st, err := LoadState(dir)
	if err != nil {
		return err
	}
	// More Ps than cores: the release thread returns from its sleep in the kernel needing a
	// P, and with only one per core it can wait behind the readers. (Measured on these noisy
	// machines, 4 gave the lowest p99 delay error of 2, 4, 8 and 16; docs/lab.md.)
	runtime.GOMAXPROCS(max(4, runtime.NumCPU()))
	l := st.Layout
	ports := make([]wan.Port, 0, len(l.Hosts))
	defer func() {
		for _, p := range ports {
			p.Close()
		}
	}()
	for _, h := range l.Hosts {
		f, err := wan.OpenTUN(h.TUN)
		if err != nil {
			return err
		}
		ports = append(ports, f)
		for _, args := range [][]string{
			{"link", "set", "dev", h.TUN, "netns", h.Netns},
			{"-n", h.Netns, "link", "set", "dev", h.TUN, "name", "wan0"},
			{"-n", h.Netns, "addr", "add", h.Addr.String() + "/16", "dev", "wan0"},
			// A long device queue: a burst the router has not read yet waits instead of
			// being dropped (the default 500 packets overflow at 20,000 packets/s).
			{"-n", h.Netns, "link", "set", "dev", "wan0", "mtu", "1500", "txqueuelen", "10000", "up"},
		} {
			if err := ip(ctx, args...); err != nil {
				return fmt.Errorf("lab: host %s: %w", h.Name, err)
			}
		}
	}
	var policy *wan.Policy
	if st.Fabric != nil {
		policy, err = wan.NewFabricPolicy(l.WANHosts(), *st.Fabric, seed)
	} else {
		policy, err = wan.NewPolicy(l.WANHosts(), l.TopologyLink, seed)
	}
	if err != nil {
		return err
	}
	r, err := wan.NewRouter(wan.RouterOptions{Policy: policy, Ports: ports, Log: log})
	if err != nil {
		return err
	}
	ports = nil // the router owns them now
	defer r.Close()
	sock := RouterSocket(dir)
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("lab: router control socket: %w", err)
	}
	_ = os.Chmod(sock, 0o600)
	hs := &http.Server{Handler: wan.Handler(r), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(lis) }()
	log.Info("router up", "hosts", len(l.Hosts), "fabric", st.Fabric != nil, "socket", sock)
	<-ctx.Done()
	_ = hs.Close()
	return nil
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
