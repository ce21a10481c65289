//go:build linux

package wan

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// OpenTUN creates a TUN device (IPv4 packets without a protocol header) in the calling
// thread's network namespace. The device lives as long as the returned file: closing it, or
// the router's exit, removes it, so a crashed router leaves no device behind.
func OpenTUN(name string) (*os.File, error) {
	if len(name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("wan: TUN name %q is longer than %d bytes", name, unix.IFNAMSIZ-1)
	}
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("wan: open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("wan: TUN name %q: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("wan: create TUN %s: %w", name, err)
	}
	// Non-blocking, so the Go runtime's poller serves Read and Write and Close wakes readers.
	return os.NewFile(uintptr(fd), "tun:"+name), nil
}
