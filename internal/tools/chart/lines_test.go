package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLines(t *testing.T) {
	dir := t.TempDir()
	series := []Series{
		{Name: "Cassandra ONE/ALL", Points: [][2]float64{{75, 25}, {85, 15}, {95, 5}}},
		{Name: "GlobLease", Points: [][2]float64{{95, 2}, {75, 12}, {85, 7}}, Dashed: true}, // unsorted
	}
	png := filepath.Join(dir, "lines.png")
	if err := Lines("requests above 300 ms", "reads (%)", "requests > 300 ms (%)", series, png); err != nil {
		t.Fatal(err)
	}
	f, err := buildLines("t", "x", "y", series, false)
	if err != nil {
		t.Fatal(err)
	}
	checkPNG(t, png, f)
	if len(f.legend) != 2 || f.panels[0][0].Y.Min != 0 {
		t.Errorf("legend %d entries, y min %v", len(f.legend), f.panels[0][0].Y.Min)
	}

	// A CDF spanning 0.2..600 ms gets a log x axis; SVG output carries the legend.
	cdf := []Series{
		{Name: "GlobLease, 95% reads", Points: [][2]float64{{0, 0}, {0.2, 0.1}, {1, 0.9}, {120, 0.95}, {600, 1}}},
		{Name: "Cassandra ONE/ALL, 95% reads", Points: [][2]float64{{0.2, 0}, {1, 0.95}, {500, 0.97}, {600, 1}}, Dashed: true},
		{Name: "empty"},
	}
	svg := filepath.Join(dir, "cdf.svg")
	if err := CombinedCDF("latency CDF", cdf, svg); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, svg, "GlobLease, 95% reads", "Cassandra ONE/ALL, 95% reads")
	f, err = buildLines("t", "latency (ms)", "y", cdf, true)
	if err != nil {
		t.Fatal(err)
	}
	if !isLogX(f.panels[0][0]) || len(f.legend) != 2 {
		t.Errorf("CDF: log x %v, legend %d entries", isLogX(f.panels[0][0]), len(f.legend))
	}

	// Errors: no points, bad extension.
	if err := Lines("t", "x", "y", []Series{{Name: "a"}}, filepath.Join(dir, "x.png")); err == nil {
		t.Error("no points accepted")
	}
	if err := Lines("t", "x", "y", series, filepath.Join(dir, "x.jpg")); err == nil || !strings.Contains(err.Error(), "unsupported") {
		t.Errorf("jpg: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.png")); err == nil {
		t.Error("file written on error")
	}
}
