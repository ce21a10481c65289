package server

import (
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"meridian/internal/config"
	"meridian/internal/hlc"
	"meridian/internal/placement"
)

func sortedNames(m map[string]*placement.Keyspace) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func nodeNames(c *config.Cluster) []string {
	out := make([]string, 0, len(c.Nodes))
	for _, n := range c.Nodes {
		out = append(out, n.Name)
	}
	return out
}

// clockHandler serves the node's clock: GET reports the offset and drift; POST with form
// fields offset (a duration, e.g. 5ms or -200ms) and/or drift_ppm (parts per million) changes
// them. An offset given alone stops the drift. (Lab nemesis; enabled by --clock-control.)
func clockHandler(c *hlc.SystemClock, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
		case http.MethodPost:
			if err := r.ParseForm(); err != nil {
				http.Error(w, "clock: "+err.Error(), http.StatusBadRequest)
				return
			}
			offStr, driftStr := r.PostForm.Get("offset"), r.PostForm.Get("drift_ppm")
			if offStr == "" && driftStr == "" {
				http.Error(w, "clock: give offset (a duration) and/or drift_ppm (a number)", http.StatusBadRequest)
				return
			}
			var off time.Duration
			var ppm float64
			var err error
			if offStr != "" {
				if off, err = time.ParseDuration(offStr); err != nil || off.Abs() > time.Hour {
					http.Error(w, fmt.Sprintf("clock: offset %q must be a duration within ±1h", offStr), http.StatusBadRequest)
					return
				}
			}
			if driftStr != "" {
				if ppm, err = strconv.ParseFloat(driftStr, 64); err != nil || math.IsNaN(ppm) || math.Abs(ppm) > 1e6 {
					http.Error(w, fmt.Sprintf("clock: drift_ppm %q must be a number within ±1e6", driftStr), http.StatusBadRequest)
					return
				}
			}
			if offStr != "" {
				c.SetOffset(off)
			}
			if driftStr != "" {
				c.SetDrift(ppm)
			}
			log.Warn("clock changed through /debug/clock", "offset", c.Offset(), "drift_ppm", c.DriftPPM())
		default:
			http.Error(w, "clock: GET or POST", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"offset_ns\":%d,\"drift_ppm\":%g}\n", c.Offset().Nanoseconds(), c.DriftPPM())
	})
}
