package actuate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"

	"meridian/internal/metadata"
)

// ProcessOptions configure a Processes actuator.
type ProcessOptions struct {
	// Binary is the meridian executable the nodes run (default: this process's).
	Binary string
	// Config is the cluster's configuration file (every node reads the same one).
	Config string
	// WorkDir holds the data directory and the log of every node started.
	WorkDir string
	// Hosts gives the address a region's new nodes listen on (default 127.0.0.1); ports are
	// chosen free.
	Hosts map[string]string
	// NamePrefix starts the names of the nodes started (default "auto-"): <prefix><region>-<n>.
	NamePrefix string
	// ExtraArgs are added to every `meridian server` command (e.g. --disk-reserve 32MiB).
	ExtraArgs []string
	// MaxStarted bounds the processes one actuator starts over its life (default 32).
	MaxStarted int
	Admin      Admin
	Log        *slog.Logger
}

// Processes adds nodes by starting `meridian server --join` processes on this machine and
// removes them by decommissioning: the configured nodes are the floor, only nodes it started
// are removed, the newest first. Nodes it started keep running when it exits (they hold
// replicas); each restarts without --join from its data directory.
type Processes struct {
	o       ProcessOptions
	mu      sync.Mutex
	seq     int
	started []*started // in start order
	obs     Observer
}

type started struct {
	name, region string
	cmd          *exec.Cmd
	done         chan struct{}
	err          error // the process's exit, once done is closed
}

// NewProcesses returns the actuator.
func NewProcesses(o ProcessOptions) (*Processes, error) {
	if o.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("actuate: the meridian binary: %w", err)
		}
		o.Binary = exe
	}
	if o.NamePrefix == "" {
		o.NamePrefix = "auto-"
	}
	if o.MaxStarted == 0 {
		o.MaxStarted = 32
	}
	switch {
	case o.Admin == nil:
		return nil, fmt.Errorf("actuate: processes need the admin API")
	case o.Config == "":
		return nil, fmt.Errorf("actuate: processes need the cluster's configuration file")
	case o.WorkDir == "":
		return nil, fmt.Errorf("actuate: processes need a work directory for the nodes' data and logs")
	case o.MaxStarted < 1:
		return nil, fmt.Errorf("actuate: max started %d: want ≥ 1", o.MaxStarted)
	}
	if err := os.MkdirAll(o.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("actuate: work directory: %w", err)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Processes{o: o, obs: Observer{Admin: o.Admin}}, nil
}

// Nodes reads the cluster status: the region's serving and joining nodes.
func (p *Processes) Nodes(ctx context.Context, region string) (serving, joining int, err error) {
	st, err := p.obs.Refresh(ctx)
	if err != nil {
		return 0, 0, err
	}
	v := View(st, region)
	return v.Serving, v.Joining, nil
}

// Leaving returns how many of region's nodes are being decommissioned (autoscale.LeavingCounter:
// the loop times scale-ins with it).
func (p *Processes) Leaving(ctx context.Context, region string) (int, error) {
	st, err := p.obs.Refresh(ctx)
	if err != nil {
		return 0, err
	}
	return View(st, region).Leaving, nil
}

// Add starts n joins in region.
func (p *Processes) Add(ctx context.Context, region string, n int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range n {
		if len(p.started) >= p.o.MaxStarted {
			return fmt.Errorf("actuate: %d processes started already (the bound)", len(p.started))
		}
		if err := p.start(region); err != nil {
			return err
		}
	}
	return nil
}

func (p *Processes) start(region string) error {
	p.seq++
	name := fmt.Sprintf("%s%s-%d", p.o.NamePrefix, region, p.seq)
	host := p.o.Hosts[region]
	if host == "" {
		host = "127.0.0.1"
	}
	addrs, err := freeAddrs(host, 3)
	if err != nil {
		return fmt.Errorf("actuate: %s: %w", name, err)
	}
	dataDir := filepath.Join(p.o.WorkDir, name)
	logFile, err := os.OpenFile(filepath.Join(p.o.WorkDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("actuate: %s: log: %w", name, err)
	}
	args := append([]string{"server", "--config", p.o.Config, "--node", name, "--data-dir", dataDir, "--join", "--region", region,
		"--listen", addrs[0], "--peer-listen", addrs[1], "--metrics", addrs[2]}, p.o.ExtraArgs...)
	cmd := exec.Command(p.o.Binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("actuate: start %s: %w", name, err)
	}
	s := &started{name: name, region: region, cmd: cmd, done: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		logFile.Close()
		close(s.done)
	}()
	p.started = append(p.started, s)
	p.o.Log.Info("autoscale: node started", "node", name, "region", region, "listen", addrs[0], "peer_listen", addrs[1], "data_dir", dataDir)
	return nil
}

// Remove decommissions n of the nodes this actuator started in region (the newest first) that
// are active: each moves its replicas away and stops by itself.
func (p *Processes) Remove(ctx context.Context, region string, n int) error {
	st, err := p.obs.Refresh(ctx)
	if err != nil {
		return err
	}
	active := map[string]bool{}
	for _, nd := range View(st, region).Nodes {
		if nd.GetState() == metadata.NodeActive && nd.GetAlive() && nd.GetBootstrap() == "" {
			active[nd.GetName()] = true
		}
	}
	p.mu.Lock()
	var victims []string
	for _, s := range slices.Backward(p.started) {
		if len(victims) == n {
			break
		}
		if s.region == region && active[s.name] {
			victims = append(victims, s.name)
		}
	}
	p.mu.Unlock()
	if len(victims) == 0 {
		return fmt.Errorf("actuate: no active node this autoscaler started is left in region %s (the configured nodes are the floor)", region)
	}
	var errs []error
	for _, name := range victims {
		if _, err := p.o.Admin.SetNodeState(ctx, name, metadata.NodeDecommissioning); err != nil {
			errs = append(errs, fmt.Errorf("decommission %s: %w", name, err))
			continue
		}
		p.o.Log.Info("autoscale: node decommissioning", "node", name, "region", region)
	}
	if len(victims) < n {
		errs = append(errs, fmt.Errorf("only %d of %d nodes could be removed from %s (the configured nodes are the floor)", len(victims), n, region))
	}
	if len(errs) > 0 {
		return fmt.Errorf("actuate: %w", errors.Join(errs...))
	}
	return nil
}

// Started lists the nodes started, with whether each process still runs.
func (p *Processes) Started() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]bool{}
	for _, s := range p.started {
		select {
		case <-s.done:
			out[s.name] = false
		default:
			out[s.name] = true
		}
	}
	return out
}

// freeAddrs returns n free host:port addresses (all listeners open until every port is
// chosen, so none is handed out twice).
func freeAddrs(host string, n int) ([]string, error) {
	var out []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("a free port on %s: %w", host, err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}
