package wan

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// The control API: HTTP with JSON bodies on a unix socket (only root on this machine reaches
// it; nothing listens on a network address).
//
//	GET  /v1/status                       Status
//	POST /v1/link   LinkRequest           change links (delay, jitter, loss, bandwidth)
//	POST /v1/cut    CutRequest            cut links
//	POST /v1/heal   CutRequest            heal links (All: every cut)
//	POST /v1/reset-lateness               clear the delay-error histogram
//	POST /v1/pin    PinRequest            pin flows to fabric paths (with a fabric)
//	POST /v1/unpin  PinRequest            return flows to ECMP
//	GET  /v1/flows                        the pinned flows and their delivered bytes

// LinkRequest changes the links from every host From selects to every host To selects
// (selectors: "*", a region, or a host name). Fields left nil keep their value.
type LinkRequest struct {
	From          string   `json:"from"`
	To            string   `json:"to"`
	Symmetric     bool     `json:"symmetric"` // also To -> From
	DelayMs       *float64 `json:"delay_ms,omitempty"`
	JitterMs      *float64 `json:"jitter_ms,omitempty"`
	LossPct       *float64 `json:"loss_pct,omitempty"`
	BandwidthMbps *float64 `json:"bandwidth_mbps,omitempty"`
}

// CutRequest cuts or heals the links From -> To (and To -> From unless OneWay). A host's
// links to hosts of its own selection are left alone: cutting region "europe" from "*"
// isolates europe without cutting europe's hosts from each other.
type CutRequest struct {
	From   string `json:"from"`
	To     string `json:"to"`
	OneWay bool   `json:"one_way"`
	All    bool   `json:"all"` // heal: every link
}

// PinRequest pins (or unpins) flows: each key to its path, an index into the paths of its
// host pair (Policy.Paths; ignored by unpin).
type PinRequest struct {
	Flows []PinnedFlow `json:"flows"`
}

// MaxPinRequestFlows bounds one pin request.
const MaxPinRequestFlows = 4096

// Handler serves the control API of r.
func Handler(r *Router) http.Handler {
	mux := http.NewServeMux()
	// Profiles of the router itself, for when it shows up in a benchmark's CPU.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, r.Status()) })
	mux.HandleFunc("POST /v1/reset-lateness", func(w http.ResponseWriter, _ *http.Request) {
		r.ResetLateness()
		writeJSON(w, map[string]string{"ok": "lateness histogram cleared"})
	})
	mux.HandleFunc("POST /v1/link", func(w http.ResponseWriter, req *http.Request) {
		var lr LinkRequest
		if !readJSON(w, req, &lr) {
			return
		}
		n := 0
		err := r.Do(func(p *Policy) error {
			pairs, err := pairsOf(p, lr.From, lr.To, !lr.Symmetric)
			if err != nil {
				return err
			}
			// Validate every new link before changing any, so a bad request changes nothing.
			updated := make([]Link, len(pairs))
			for k, pr := range pairs {
				l := p.Link(pr[0], pr[1])
				setIf(&l.DelayMs, lr.DelayMs)
				setIf(&l.JitterMs, lr.JitterMs)
				setIf(&l.LossPct, lr.LossPct)
				setIf(&l.BandwidthMbps, lr.BandwidthMbps)
				if err := l.Validate(); err != nil {
					return err
				}
				updated[k] = l
			}
			for k, pr := range pairs {
				_ = p.SetLink(pr[0], pr[1], updated[k])
			}
			n = len(pairs)
			return nil
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, map[string]int{"links_changed": n})
	})
	cutOrHeal := func(cut bool) http.HandlerFunc {
		return func(w http.ResponseWriter, req *http.Request) {
			var cr CutRequest
			if !readJSON(w, req, &cr) {
				return
			}
			n := 0
			err := r.Do(func(p *Policy) error {
				if !cut && cr.All {
					cr.From, cr.To, cr.OneWay = "*", "*", false
				}
				pairs, err := pairsOf(p, cr.From, cr.To, cr.OneWay)
				if err != nil {
					return err
				}
				for _, pr := range pairs {
					p.SetCut(pr[0], pr[1], cut)
				}
				n = len(pairs)
				return nil
			})
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			writeJSON(w, map[string]int{"links_changed": n})
		}
	}
	pinOrUnpin := func(pinning bool) http.HandlerFunc {
		return func(w http.ResponseWriter, req *http.Request) {
			var pr PinRequest
			if !readJSON(w, req, &pr) {
				return
			}
			if len(pr.Flows) > MaxPinRequestFlows {
				http.Error(w, fmt.Sprintf("wan: %d flows in one request; at most %d", len(pr.Flows), MaxPinRequestFlows), http.StatusBadRequest)
				return
			}
			n := 0
			err := r.Do(func(p *Policy) error {
				if !p.HasFabric() {
					return fmt.Errorf("wan: this router has no fabric; flows cannot be pinned")
				}
				for _, f := range pr.Flows {
					if !pinning {
						if p.Unpin(f.Key) {
							n++
						}
						continue
					}
					if err := p.Pin(f.Key, f.Path); err != nil {
						return err // earlier flows of the request stay pinned; n says how many
					}
					n++
				}
				return nil
			})
			if err != nil {
				http.Error(w, fmt.Sprintf("%v (%d flows changed before it)", err, n), http.StatusBadRequest)
				return
			}
			writeJSON(w, map[string]int{"flows_changed": n})
		}
	}
	mux.HandleFunc("POST /v1/pin", pinOrUnpin(true))
	mux.HandleFunc("POST /v1/unpin", pinOrUnpin(false))
	mux.HandleFunc("GET /v1/flows", func(w http.ResponseWriter, _ *http.Request) {
		var flows []PinnedFlow
		_ = r.Do(func(p *Policy) error { flows = p.Pinned(); return nil })
		writeJSON(w, PinRequest{Flows: flows})
	})
	mux.HandleFunc("POST /v1/cut", cutOrHeal(true))
	mux.HandleFunc("POST /v1/heal", cutOrHeal(false))
	return mux
}

func setIf(dst *float64, v *float64) {
	if v != nil {
		*dst = *v
	}
}

// pairsOf lists the directed links from hosts selected by from to hosts selected by to
// (both directions unless oneWay), leaving out a host's links to itself and, when the
// selectors overlap, links within the overlap.
func pairsOf(p *Policy, from, to string, oneWay bool) ([][2]int, error) {
	if from == "" || to == "" {
		return nil, fmt.Errorf("wan: give from and to (\"*\", a region or a host)")
	}
	a, err := p.Select(from)
	if err != nil {
		return nil, err
	}
	b, err := p.Select(to)
	if err != nil {
		return nil, err
	}
	inA := map[int]bool{}
	for _, i := range a {
		inA[i] = true
	}
	seen := map[[2]int]bool{}
	var out [][2]int
	add := func(i, j int) {
		if i == j || seen[[2]int{i, j}] {
			return
		}
		seen[[2]int{i, j}] = true
		out = append(out, [2]int{i, j})
	}
	for _, i := range a {
		for _, j := range b {
			if inA[j] && from != to && to == "*" {
				continue // "europe" to "*": not europe's links to itself
			}
			add(i, j)
			if !oneWay {
				add(j, i)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("wan: %s -> %s selects no link", from, to)
	}
	return out, nil
}

func readJSON(w http.ResponseWriter, req *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(req.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		http.Error(w, "wan: bad request body: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// Client calls a router's control API on its unix socket.
type Client struct {
	Socket string
	hc     *http.Client
}

// NewClient returns a client of the router listening on socket.
func NewClient(socket string) *Client {
	return &Client{Socket: socket, hc: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}}}}
}

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	return c.do(ctx, method, "http://router"+path, body, out)
}

// callURL posts in to a full URL (tests serve the API on TCP).
func (c *Client) callURL(ctx context.Context, url string, in any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPost, url, bytes.NewReader(b), nil)
}

func (c *Client) do(ctx context.Context, method, url string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("wan: router at %s: %w", c.Socket, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("wan: router at %s: %w", c.Socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("wan: router: %s", bytes.TrimSpace(data))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// Status returns the router's state and counters.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	err := c.call(ctx, http.MethodGet, "/v1/status", nil, &s)
	return s, err
}

// SetLink changes links.
func (c *Client) SetLink(ctx context.Context, r LinkRequest) error {
	return c.call(ctx, http.MethodPost, "/v1/link", r, nil)
}

// Cut cuts links.
func (c *Client) Cut(ctx context.Context, r CutRequest) error {
	return c.call(ctx, http.MethodPost, "/v1/cut", r, nil)
}

// Heal heals links.
func (c *Client) Heal(ctx context.Context, r CutRequest) error {
	return c.call(ctx, http.MethodPost, "/v1/heal", r, nil)
}

// Pin pins flows to fabric paths.
func (c *Client) Pin(ctx context.Context, flows []PinnedFlow) error {
	return c.call(ctx, http.MethodPost, "/v1/pin", PinRequest{Flows: flows}, nil)
}

// Unpin returns flows to ECMP.
func (c *Client) Unpin(ctx context.Context, keys []FlowKey) error {
	flows := make([]PinnedFlow, len(keys))
	for i, k := range keys {
		flows[i].Key = k
	}
	return c.call(ctx, http.MethodPost, "/v1/unpin", PinRequest{Flows: flows}, nil)
}

// Flows returns the pinned flows with the bytes delivered for each.
func (c *Client) Flows(ctx context.Context) ([]PinnedFlow, error) {
	var pr PinRequest
	err := c.call(ctx, http.MethodGet, "/v1/flows", nil, &pr)
	return pr.Flows, err
}

// ResetLateness clears the delay-error histogram.
func (c *Client) ResetLateness(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, "/v1/reset-lateness", nil, nil)
}
