//go:build unix

package kawkab

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// lockStream takes an exclusive advisory lock (flock) on the stream's metadata file, held
// until the returned closer is closed: a stream has one writer (5.3.2, "Primary nodes"), and
// a second OpenStream of the same directory, in this process or another, is refused. The
// kernel drops the lock when the process dies, so a crashed writer does not keep it.
func lockStream(path string) (io.Closer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("kawkab: lock stream: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("kawkab: lock stream %s: %w", path, ErrStreamLocked)
		}
		return nil, fmt.Errorf("kawkab: lock stream %s: %w", path, err)
	}
	return f, nil
}
