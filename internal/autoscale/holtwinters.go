// Package autoscale is Meridian's elasticity controller after ProRenaTa (liu-thesis abstract,
// 1.4 "ProRenaTa", 1.5, 3.2.5): a workload predictor, a data-migration model, and a controller
// that scales proactively — early enough for the data to have moved by the time the predicted
// load arrives — corrects reactively when the observation leaves the prediction, falls back to
// reactive control when the predictor's recent error is large, and scales in only when both
// agree, after a stabilisation time. The controller is a sans-IO state machine: the runtime
// feeds it one observation per control period and carries out its decisions (joins and
// decommissions). docs/elasticity.md ("Autoscaling") names every decision taken where the
// thesis' summary is silent.
package autoscale

import (
	"fmt"
	"math"
)

// HoltWinters is additive Holt-Winters exponential smoothing with one season (Holt 1957,
// Winters 1960; Hyndman & Athanasopoulos, Forecasting: Principles and Practice, 8.3): level,
// trend and a seasonal component of Season periods (a day of control periods, for the daily
// cycle of a storage workload). No well-kept Go library implements it (gonum has none); the
// method is short and tested here (holtwinters_test.go).
type HoltWinters struct {
	alpha, beta, gamma float64
	season             int
	level, trend       float64
	seasonal           []float64
	// warm holds the first two seasons, from which the components are initialised.
	warm []float64
	n    int
}

// NewHoltWinters returns a predictor with smoothing factors alpha (level), beta (trend) and
// gamma (season), each in (0, 1), and a season of season periods (≥ 2).
func NewHoltWinters(alpha, beta, gamma float64, season int) (*HoltWinters, error) {
	for _, f := range []float64{alpha, beta, gamma} {
		if !(f > 0 && f < 1) {
			return nil, fmt.Errorf("autoscale: Holt-Winters smoothing factors must be in (0, 1), got %v, %v, %v", alpha, beta, gamma)
		}
	}
	if season < 2 {
		return nil, fmt.Errorf("autoscale: a season of %d periods (want ≥ 2)", season)
	}
	return &HoltWinters{alpha: alpha, beta: beta, gamma: gamma, season: season}, nil
}

// Ready reports whether the predictor has seen two seasons (it forecasts only then).
func (h *HoltWinters) Ready() bool { return h.seasonal != nil }

// Observe adds the next period's value.
func (h *HoltWinters) Observe(x float64) {
	if h.seasonal == nil {
		h.warm = append(h.warm, x)
		if len(h.warm) == 2*h.season {
			h.init()
		}
		return
	}
	m := h.season
	s := h.seasonal[h.n%m]
	prevLevel := h.level
	h.level = h.alpha*(x-s) + (1-h.alpha)*(h.level+h.trend)
	h.trend = h.beta*(h.level-prevLevel) + (1-h.beta)*h.trend
	h.seasonal[h.n%m] = h.gamma*(x-h.level) + (1-h.gamma)*s
	h.n++
}

// init sets the components from the first two seasons: the level is the first season's mean,
// the trend the mean change per period between the two seasons, the season each period's
// deviation from its season's mean, averaged over the two.
func (h *HoltWinters) init() {
	m := h.season
	mean1, mean2 := 0.0, 0.0
	for i := range m {
		mean1 += h.warm[i]
		mean2 += h.warm[m+i]
	}
	mean1, mean2 = mean1/float64(m), mean2/float64(m)
	h.trend = (mean2 - mean1) / float64(m)
	h.seasonal = make([]float64, m)
	for i := range m {
		h.seasonal[i] = ((h.warm[i] - mean1) + (h.warm[m+i] - mean2)) / 2
	}
	// The level at the end of the second season; the next observation is period 0 of the
	// third.
	h.level = mean2 + h.trend*float64(m-1)/2
	h.n = 0
	h.warm = nil
}

// Forecast returns the value predicted ahead periods from now (ahead ≥ 1); NaN until Ready.
func (h *HoltWinters) Forecast(ahead int) float64 {
	if h.seasonal == nil || ahead < 1 {
		return math.NaN()
	}
	return h.level + float64(ahead)*h.trend + h.seasonal[(h.n+ahead-1)%h.season]
}
