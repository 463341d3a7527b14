package egress

import "net"

// spliceStream carries bytes both ways between conn and one side of a
// bidirectional stream, and returns when both directions have ended:
// what conn reads goes out through send (in chunks of at most chunk
// bytes), and its end through closeSend; what recv returns is written to
// conn, and a close-write mark half-closes conn. When either side fails,
// conn is closed, which ends the other direction too.
func spliceStream(conn net.Conn, send func([]byte) error, closeSend func() error, recv func() (data []byte, closeWrite bool, err error)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, chunk)
		for {
			n, err := conn.Read(buf)
			if n > 0 {
				if serr := send(buf[:n]); serr != nil {
					conn.Close()
					return
				}
			}
			if err != nil {
				closeSend()
				return
			}
		}
	}()
	for {
		data, cw, err := recv()
		if err != nil {
			conn.Close() // the stream's side is gone
			break
		}
		if len(data) > 0 {
			if _, err := conn.Write(data); err != nil {
				conn.Close()
				break
			}
		}
		if cw {
			closeWrite(conn)
		}
	}
	<-done
}
