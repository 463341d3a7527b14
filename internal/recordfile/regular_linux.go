package recordfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// MaxRecord bounds a record file: a sandbox's record or container
// description takes a few KiB.
const MaxRecord = 1 << 20

// ErrNotRegular means a record's path holds a link, a FIFO, a device, a
// directory or more than its limit: something runbox never writes there.
var ErrNotRegular = errors.New("not a regular file of its size")

// ReadRegular reads the file at path, at most limit bytes, only when it is
// a regular file: opened without following a link (O_NOFOLLOW), never
// waiting on a FIFO's writer or a device (O_NONBLOCK, O_NOCTTY), checked
// by fstat on what was opened, so a file planted in its place can neither
// hold its reader nor make it read another file.
func ReadRegular(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s: a link: %w", path, ErrNotRegular)
	} else if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > limit {
		return nil, fmt.Errorf("%s: %v of %d bytes (at most %d): %w", path, fi.Mode().Type(), fi.Size(), limit, ErrNotRegular)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: more than %d bytes: %w", path, limit, ErrNotRegular)
	}
	return b, nil
}
