package supervisor

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// maxLateDrainBytes bounds what readStream reads past the drain deadline,
// so that a background process writing without pause cannot hold the
// result back.
const maxLateDrainBytes = 1 << 20

// readAvailable reads what f (a pipe) holds now, without waiting: 0 bytes
// and os.ErrDeadlineExceeded when it holds nothing (or at end of file).
func readAvailable(f *os.File, buf []byte) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	_ = f.SetReadDeadline(time.Time{}) // RawConn.Read refuses a passed deadline
	var n int
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		n, rerr = unix.Read(int(fd), buf)
		return true // never wait for more
	}); err != nil {
		return 0, err
	}
	if n <= 0 || rerr != nil {
		return 0, os.ErrDeadlineExceeded
	}
	_ = f.SetReadDeadline(time.Now()) // keep every later Read from waiting
	return n, nil
}
