package storage

import "golang.org/x/sys/unix"

// fallocate reserves size bytes of blocks for the file fd (mode 0: the size grows too).
func fallocate(fd uintptr, size uint64) error {
	return unix.Fallocate(int(fd), 0, 0, int64(size))
}
