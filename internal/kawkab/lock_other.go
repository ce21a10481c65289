//go:build !unix

package kawkab

import "io"

type noLock struct{}

func (noLock) Close() error { return nil }

// lockStream does not lock outside Unix: the caller must not open a stream twice.
func lockStream(string) (io.Closer, error) { return noLock{}, nil }
