package peer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// Process is one peer node's OS process. It runs on its host in a process group of its own
// (a kill reaches the node even when the host's command wraps it, as `ip netns exec` does),
// dies with this process (no JVM or etcd outlives a crashed test or benchmark), and appends
// its output to a log file. The zero value is a process that was never started.
type Process struct {
	mu   sync.Mutex
	pid  int
	done chan struct{} // closed when the current process has exited
	err  error         // its exit status, set before done closes
}

// Start runs name with args on h, in dir (empty: inherited), appending its output to
// logPath after the line header. The process outlives ctx only if ctx does; peers pass a
// context that lives as long as their cluster.
func (p *Process) Start(ctx context.Context, h Host, logPath, dir, header, name string, args ...string) (pid int, err error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, fmt.Errorf("peer: log of %s: %w", h.Name, err)
	}
	if header != "" {
		fmt.Fprintln(logf, header)
	}
	cmd := h.Cmd(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = dir
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return 0, fmt.Errorf("peer: start %s on %s: %w", name, h.Name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.pid, p.done, p.err = cmd.Process.Pid, done, nil
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return cmd.Process.Pid, nil
}

// Pid is the current (or last) process's id; 0 if it was never started.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

// Done is closed when the current process exits; nil if it was never started.
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Exited reports whether the current process has exited (or never started), and how.
func (p *Process) Exited() (bool, error) {
	done := p.Done()
	if done == nil {
		return true, errors.New("never started")
	}
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return true, p.err
	default:
		return false, nil
	}
}

// Running reports whether the current process is running.
func (p *Process) Running() bool {
	exited, _ := p.Exited()
	return !exited
}

// Stop asks the process's group to exit (SIGTERM: a JVM runs its shutdown hooks, which close
// its files and flush its log), waits at most grace for it, then kills it as Kill does
// (waiting at most limit). A process that was never started or has exited is not an error.
func (p *Process) Stop(grace, limit time.Duration) error {
	if _, exited := p.signalAndWait(syscall.SIGTERM, grace); exited {
		return nil
	}
	return p.Kill(limit)
}

// signalAndWait sends sig to the process's group and waits, at most wait, for it to exit;
// exited is true also when it was never started or had exited already.
func (p *Process) signalAndWait(sig syscall.Signal, wait time.Duration) (pid int, exited bool) {
	p.mu.Lock()
	pid, done := p.pid, p.done
	p.mu.Unlock()
	if done == nil {
		return pid, true
	}
	select {
	case <-done:
		return pid, true
	default:
	}
	_ = syscall.Kill(-pid, sig)
	_ = syscall.Kill(pid, sig)
	select {
	case <-done:
		return pid, true
	case <-time.After(wait):
		return pid, false
	}
}

// Kill sends SIGKILL to the process's group and waits, at most limit, for it to exit. A
// process that was never started or has exited is not an error.
func (p *Process) Kill(limit time.Duration) error {
	if pid, exited := p.signalAndWait(syscall.SIGKILL, limit); !exited {
		return fmt.Errorf("peer: pid %d did not exit within %v of SIGKILL", pid, limit)
	}
	return nil
}
