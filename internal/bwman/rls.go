package bwman

import "gonum.org/v1/gonum/mat"

// RLS is recursive least squares with exponential forgetting: the weights w minimising
// Σ λ^(n−i) (y_i − w·x_i)², updated in O(d²) per sample (Haykin, Adaptive Filter Theory,
// ch. 10). BwMan learns the clients' bandwidth need with it online, instead of the thesis'
// offline training.
type RLS struct {
	lambda float64
	w      *mat.VecDense
	p      *mat.Dense
	n      int
}

// NewRLS returns an estimator of d weights with forgetting factor lambda (0.5 < λ ≤ 1).
func NewRLS(d int, lambda float64) *RLS {
	p := mat.NewDense(d, d, nil)
	for i := range d {
		p.Set(i, i, 1e6) // a weak prior: the first samples decide
	}
	return &RLS{lambda: lambda, w: mat.NewVecDense(d, nil), p: p}
}

// Update adds the sample (x, y).
func (r *RLS) Update(x []float64, y float64) {
	d := r.w.Len()
	xv := mat.NewVecDense(d, x)
	var px mat.VecDense
	px.MulVec(r.p, xv)
	denom := r.lambda + mat.Dot(xv, &px)
	if denom <= 0 {
		return // numerically degenerate: skip the sample
	}
	var k mat.VecDense
	k.ScaleVec(1/denom, &px)
	e := y - mat.Dot(r.w, xv)
	r.w.AddScaledVec(r.w, e, &k)
	// P ← (P − k xᵀ P) / λ
	var xtp mat.VecDense
	xtp.MulVec(r.p.T(), xv)
	var kx mat.Dense
	kx.Outer(1, &k, &xtp)
	r.p.Sub(r.p, &kx)
	r.p.Scale(1/r.lambda, r.p)
	// Covariance windup: in directions the samples do not excite (BwMan's read rate and
	// read bytes move together when values have one size), dividing by λ every step makes P
	// grow without bound, and the next sample that strays there swings the weights wildly.
	// Bounding P's trace (Åström & Wittenmark, Adaptive Control, 11.3) keeps the gain finite.
	if tr := mat.Trace(r.p); tr > maxTraceP {
		r.p.Scale(maxTraceP/tr, r.p)
	}
	r.n++
}

// maxTraceP bounds the trace of P: the prior's (1e6 per weight) for up to ten weights.
const maxTraceP = 1e7

// Predict returns w·x.
func (r *RLS) Predict(x []float64) float64 {
	return mat.Dot(r.w, mat.NewVecDense(r.w.Len(), x))
}

// Trained reports whether the estimator has seen enough samples to be used (twice its
// dimension).
func (r *RLS) Trained() bool { return r.n >= 2*r.w.Len() }

// Weights returns a copy of the weights.
func (r *RLS) Weights() []float64 {
	out := make([]float64, r.w.Len())
	for i := range out {
		out[i] = r.w.AtVec(i)
	}
	return out
}
