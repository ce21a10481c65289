//go:build !linux

package storage

import "errors"

// fallocate is Linux-only here; elsewhere the ballast is written with zeros.
func fallocate(uintptr, uint64) error { return errors.New("fallocate: not supported") }
