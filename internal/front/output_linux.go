package front

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// writeAll writes bufs to f in order with as few writev(2) calls as the
// file takes them in.
func writeAll(f *os.File, bufs [][]byte) error {
	if len(bufs) == 1 {
		_, err := f.Write(bufs[0])
		return err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	for len(bufs) > 0 {
		var n int
		var werr error
		err := rc.Write(func(fd uintptr) bool {
			for {
				n, werr = unix.Writev(int(fd), bufs)
				if werr != unix.EINTR {
					return werr != unix.EAGAIN
				}
			}
		})
		if err != nil {
			return err
		}
		if werr != nil {
			return werr
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		for n > 0 && len(bufs) > 0 {
			if n < len(bufs[0]) {
				bufs[0] = bufs[0][n:]
				break
			}
			n -= len(bufs[0])
			bufs = bufs[1:]
		}
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
	}
	return nil
}
