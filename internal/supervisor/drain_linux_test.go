package supervisor

import (
	"errors"
	"os"
	"testing"
	"time"
)

// TestReadAvailableAfterDeadline: once a pipe's read deadline has passed,
// os.File.Read reports the deadline without reading what the pipe holds
// (so a reader scheduled late lost the last output of an exec on a busy
// machine: seen as an empty stdout in the server's load test).
// readAvailable reads it, and never waits on an empty pipe.
func TestReadAvailableAfterDeadline(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, err := w.Write([]byte("last words\n")); err != nil {
		t.Fatal(err)
	}
	r.SetReadDeadline(time.Now().Add(-time.Second))
	buf := make([]byte, 64)
	if n, err := r.Read(buf); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past the deadline = %d, %v: the premise of this test no longer holds", n, err)
	}
	n, err := readAvailable(r, buf)
	if err != nil || string(buf[:n]) != "last words\n" {
		t.Fatalf("readAvailable = %q, %v", buf[:n], err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if n, err := readAvailable(r, buf); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("readAvailable on an empty pipe = %d, %v", n, err)
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("readAvailable waited on an empty pipe")
	}
}
