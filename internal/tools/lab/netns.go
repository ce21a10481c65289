//go:build linux

package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"meridian/internal/tools/peer"
)

// NetnsPrefix starts the name of every namespace the lab creates, so that Down finds them
// all, even those of a lab whose state directory is gone.
const NetnsPrefix = "mlab-"

// CheckPrivileges says clearly why the lab cannot run here, or nil.
func CheckPrivileges() error {
	if os.Geteuid() != 0 {
		return errors.New("lab: needs root, to create network namespaces and TUN devices; run it as root (e.g. sudo meridian lab up)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return fmt.Errorf("lab: no TUN device support (/dev/net/tun: %v); the WAN router needs it", err)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("lab: the ip command (Debian package iproute2) is missing; apt-get install iproute2")
	}
	return nil
}

// ip runs the ip command and returns a wrapped error with its output.
func ip(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("lab: ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// createNetns creates an isolated namespace: loopback up, IPv6 off (the router carries
// IPv4 only), and no route off the machine — its only other device is its TUN device.
func createNetns(ctx context.Context, name string) error {
	if err := ip(ctx, "netns", "add", name); err != nil {
		return err
	}
	if err := ip(ctx, "-n", name, "link", "set", "lo", "up"); err != nil {
		return err
	}
	for _, key := range []string{"all", "default", "lo"} {
		path := "/proc/sys/net/ipv6/conf/" + key + "/disable_ipv6"
		if err := runInNetns(name, func() error { return os.WriteFile(path, []byte("1"), 0o644) }); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("lab: disable IPv6 in %s: %w", name, err)
		}
	}
	return nil
}

// listNetns returns the lab's namespaces.
func listNetns() ([]string, error) {
	entries, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lab: list namespaces: %w", err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), NetnsPrefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// netnsPids lists the processes running in namespace name.
func netnsPids(name string) []int {
	target, err := os.Stat(filepath.Join("/run/netns", name))
	if err != nil {
		return nil
	}
	tst, ok := target.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	procs, _ := os.ReadDir("/proc")
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		st, err := os.Stat(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			continue
		}
		if s, ok := st.Sys().(*syscall.Stat_t); ok && s.Ino == tst.Ino && s.Dev == tst.Dev {
			pids = append(pids, pid)
		}
	}
	return pids
}

// deleteNetns kills every process in the namespace and removes it.
func deleteNetns(ctx context.Context, name string) error {
	pids := netnsPids(name)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	waitGone(pids, 10*time.Second)
	return ip(ctx, "netns", "del", name)
}

// waitGone waits (bounded) until none of pids exists.
func waitGone(pids []int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for _, pid := range pids {
		for time.Now().Before(deadline) {
			if err := syscall.Kill(pid, 0); err != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// runInNetns runs fn on an OS thread switched into namespace name. Sockets fn creates stay in
// that namespace for their whole life, whichever thread later uses them: that is how one
// benchmark process dials from every region's client host.
func runInNetns(name string, fn func() error) error {
	target, err := unix.Open(filepath.Join("/run/netns", name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("lab: namespace %s: %w", name, err)
	}
	defer unix.Close(target)
	runtime.LockOSThread()
	orig, err := unix.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("lab: own namespace: %w", err)
	}
	defer unix.Close(orig)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("lab: enter namespace %s: %w", name, err)
	}
	fnErr := fn()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: the runtime then ends it with this goroutine rather than
		// reuse a thread stuck in the wrong namespace.
		return errors.Join(fnErr, fmt.Errorf("lab: leave namespace %s: %w", name, err))
	}
	runtime.UnlockOSThread()
	return fnErr
}

// DialFrom returns a dial function whose connections start in namespace name (a client
// host of the lab).
func DialFrom(name string) peer.DialFunc {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		var conn net.Conn
		err := runInNetns(name, func() error {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, address)
			conn = c
			return err
		})
		return conn, err
	}
}

// ListenIn opens a listener inside namespace name.
func ListenIn(name, network, address string) (net.Listener, error) {
	var l net.Listener
	err := runInNetns(name, func() error {
		var err error
		l, err = net.Listen(network, address)
		return err
	})
	return l, err
}

// ListenPacketIn opens a packet socket inside namespace name.
func ListenPacketIn(name, network, address string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := runInNetns(name, func() error {
		var err error
		pc, err = net.ListenPacket(network, address)
		return err
	})
	return pc, err
}

// netnsCommand builds a command that runs in namespace name.
func netnsCommand(ctx context.Context, name, prog string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", name, prog}, args...)...)
}
