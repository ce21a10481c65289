package streambench

import (
	"io"
	"os"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/vgsvg"
)

func newSVG(w, h vg.Length) *vgsvg.Canvas { return vgsvg.New(w, h) }

// writeTo writes a canvas's encoding to path.
func writeTo(path string, w io.WriterTo) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	_, err = w.WriteTo(f)
	return err
}
