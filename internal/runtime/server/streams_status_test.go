package server

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"meridian/internal/errs"
	"meridian/internal/kawkab"
)

// TestStreamStatus: every engine sentinel (wrapped as the engine wraps it) maps to its code,
// catalog errors keep theirs, and the full-store sentinel is RESOURCE_EXHAUSTED.
func TestStreamStatus(t *testing.T) {
	wrap := func(s error) error { return fmt.Errorf("kawkab: stream 7: something: %w", s) }
	for _, tc := range []struct {
		err  error
		code codes.Code
	}{
		{wrap(errStoreFull), codes.ResourceExhausted},
		{wrap(kawkab.ErrOutOfOrder), codes.InvalidArgument},
		{wrap(kawkab.ErrInvalidBatch), codes.InvalidArgument},
		{wrap(kawkab.ErrReadTooLarge), codes.InvalidArgument},
		{wrap(kawkab.ErrInvalidConfig), codes.InvalidArgument},
		{wrap(kawkab.ErrOutOfRange), codes.OutOfRange},
		{wrap(kawkab.ErrStreamClosed), codes.Unavailable},
		{wrap(kawkab.ErrStreamFailed), codes.Unavailable},
		{wrap(kawkab.ErrStreamLocked), codes.Unavailable},
		{wrap(kawkab.ErrCorrupt), codes.DataLoss},
		{wrap(context.DeadlineExceeded), codes.DeadlineExceeded},
		{fmt.Errorf("disk on fire"), codes.Internal},
		{errs.New(errs.NotFound, "no stream"), codes.NotFound},
		{errs.New(errs.Unavailable, "no live node"), codes.Unavailable},
		{status.Error(codes.Aborted, "as is"), codes.Aborted},
	} {
		got := streamStatus(tc.err)
		if status.Code(got) != tc.code {
			t.Errorf("%v: %v, want %v", tc.err, status.Code(got), tc.code)
		}
	}
	if streamStatus(nil) != nil {
		t.Fatal("nil error mapped to a status")
	}
	if m := status.Convert(streamStatus(wrap(kawkab.ErrCorrupt))).Message(); m != "stream 7: something: stream files are inconsistent" {
		t.Fatalf("message %q keeps the engine's prefix", m)
	}
}
