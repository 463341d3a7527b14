package frontrpc

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// TestInfoAnswerIsBounded: a hostile runboxd (a command that took the
// socket of an ssh sandbox's runboxd, which runs as the same user, or a
// compromised runboxd) answers the front's Info call with an endless body,
// chunked or until the connection closes. Info must stop reading at a
// bound and fail (ErrStreamBroken), not gather what the daemon sends:
// the daemon gets to write at most that bound plus what the socket
// buffers. Before: Info read all 256 MiB the test's daemon sent into
// memory.
func TestInfoAnswerIsBounded(t *testing.T) {
	const sent = 256 << 20
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), fmt.Sprintf("d%d.sock", rand.Uint32()))
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			written := make(chan int, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					written <- 0
					return
				}
				defer c.Close()
				r := bufio.NewReader(c)
				for { // the request's headers; Info has no body
					l, err := r.ReadString('\n')
					if err != nil || l == "\r\n" {
						break
					}
				}
				head := "HTTP/1.1 200 OK\r\nContent-Type: application/proto\r\n"
				if chunked {
					head += "Transfer-Encoding: chunked\r\n"
				}
				if _, err := fmt.Fprint(c, head+"\r\n"); err != nil {
					written <- 0
					return
				}
				block := make([]byte, 64<<10)
				n := 0
				for n < sent {
					var err error
					if chunked {
						_, err = fmt.Fprintf(c, "%x\r\n", len(block))
					}
					if err == nil {
						_, err = c.Write(block)
					}
					if err == nil && chunked {
						_, err = fmt.Fprint(c, "\r\n")
					}
					if err != nil {
						break
					}
					n += len(block)
				}
				written <- n
			}()
			c, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(5 * time.Minute)) // a hang, not a slow answer
			_, err = Info(c)
			c.Close()
			if !errors.Is(err, ErrStreamBroken) {
				t.Errorf("Info of an endless answer: %v; want ErrStreamBroken", err)
			}
			if n := <-written; n >= sent {
				t.Errorf("Info read all %d bytes the daemon sent; want it to stop at its bound", n)
			}
		})
	}
}
