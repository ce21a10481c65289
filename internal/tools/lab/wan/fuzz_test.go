package wan

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzControlAPI feeds arbitrary bodies to the control API: every request must be answered
// 200 or 400 (never a panic or a 500), and a refused request must change nothing.
func FuzzControlAPI(f *testing.F) {
	for _, seed := range []string{
		`{"from":"europe","to":"us","delay_ms":80}`,
		`{"from":"*","to":"*","symmetric":true,"loss_pct":5,"jitter_ms":1,"bandwidth_mbps":10}`,
		`{"from":"europe","to":"*","one_way":true}`,
		`{"all":true}`,
		`{"from":"mars","to":"*"}`,
		`{"from":"eu-1","to":"us-1","delay_ms":-1}`,
		`{"from":"eu-1","to":"us-1","loss_pct":1e309}`,
		`[]`, `{`, ``,
	} {
		for _, path := range []string{"/v1/link", "/v1/cut", "/v1/heal"} {
			f.Add(path, seed)
		}
	}
	p, err := NewPolicy(hosts3(), regionDelay, 1)
	if err != nil {
		f.Fatal(err)
	}
	r := &Router{o: RouterOptions{Policy: p}, stats: grid[*linkStats](3), start: time.Now()}
	for i := range 3 {
		for j := range 3 {
			r.stats[i][j] = &linkStats{}
		}
	}
	h := Handler(r)
	f.Fuzz(func(t *testing.T, path, body string) {
		if path != "/v1/link" && path != "/v1/cut" && path != "/v1/heal" {
			return
		}
		before := snapshot(p)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		switch rec.Code {
		case http.StatusOK:
		case http.StatusBadRequest:
			if after := snapshot(p); after != before {
				t.Fatalf("a refused request changed the links:\n%s\n%s", before, after)
			}
		default:
			t.Fatalf("%s %q: status %d: %s", path, body, rec.Code, rec.Body)
		}
		for i := range 3 {
			for j := range 3 {
				if err := p.Link(i, j).Validate(); err != nil {
					t.Fatalf("an accepted request left an invalid link: %v", err)
				}
			}
		}
	})
}

func snapshot(p *Policy) string {
	var b strings.Builder
	for i := range p.Hosts() {
		for j := range p.Hosts() {
			l := p.Link(i, j)
			b.WriteString(strings.Join([]string{ftoa(l.DelayMs), ftoa(l.JitterMs), ftoa(l.LossPct), ftoa(l.BandwidthMbps)}, ","))
			if p.Cut(i, j) {
				b.WriteString("x")
			}
			b.WriteString(";")
		}
	}
	return b.String()
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
