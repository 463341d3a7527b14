//go:build !linux

package front

import "os"

// writeAll writes bufs to f in order, one write each.
func writeAll(f *os.File, bufs [][]byte) error {
	for _, b := range bufs {
		if _, err := f.Write(b); err != nil {
			return err
		}
	}
	return nil
}
