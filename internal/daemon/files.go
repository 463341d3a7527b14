package daemon

import (
	"errors"
	"io"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"

	"github.com/runbox/runbox/gen/runbox/v1/runboxv1connect"
	"github.com/runbox/runbox/internal/files"
)

// Sizes of the files API's stream messages.
const (
	// fileChunk is the data carried by one message of a file or archive
	// stream: large enough that per-message overhead is noise, small enough
	// that a transfer's memory stays constant and flow control stays fine.
	fileChunk = 256 << 10
	// entryBatch is how many FileInfos one listing or manifest message
	// carries.
	entryBatch = 1000
)

// filesServer implements runboxv1connect.FilesServiceHandler: a thin
// adapter over package files, which does the work and the path checks.
type filesServer struct {
	s *Server
	// cache remembers the sha256 of files the daemon wrote or hashed, so
	// manifests rarely read file contents.
	cache *files.HashCache
}

var _ runboxv1connect.FilesServiceHandler = (*filesServer)(nil)

func newFilesServer(s *Server) *filesServer {
	return &filesServer{s: s, cache: files.NewHashCache(0)}
}

// open returns the FS for a request's root ("" for none).
func (fs *filesServer) open(root string) (*files.FS, error) {
	return files.Open(root)
}

// chunkWriter turns writes into messages of at most fileChunk bytes, sent
// by send (which must not keep the slice).
type chunkWriter struct {
	send func([]byte) error
	buf  []byte
}

func newChunkWriter(send func([]byte) error) *chunkWriter {
	return &chunkWriter{send: send, buf: make([]byte, 0, fileChunk)}
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf = w.buf[:len(w.buf)+k]
		p = p[k:]
		n += k
		if len(w.buf) == cap(w.buf) {
			if err := w.Flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// Flush sends what is buffered.
func (w *chunkWriter) Flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.send(w.buf)
	w.buf = w.buf[:0]
	return err
}

// dataReader reads the data of the messages still to come on a client
// stream (after its header) as one byte stream.
func dataReader[M any, PM interface {
	*M
	GetData() []byte
}](stream *connect.ClientStream[M]) io.Reader {
	return &msgReader{next: func() ([]byte, error) {
		if stream.Receive() {
			data := PM(stream.Msg()).GetData()
			if err := runbox.CheckSize("file data message", int64(len(data)), runbox.MaxFileChunkBytes, "runbox.MaxFileChunkBytes"); err != nil {
				return nil, err
			}
			return data, nil
		}
		if err := stream.Err(); err != nil {
			return nil, err
		}
		return nil, io.EOF
	}}
}

// msgReader reads the data of a stream's messages as one byte stream.
type msgReader struct {
	next func() ([]byte, error) // io.EOF at the end
	cur  []byte
	err  error
}

func (r *msgReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		r.cur, r.err = r.next()
		if r.err != nil && !errors.Is(r.err, io.EOF) && len(r.cur) == 0 {
			return 0, r.err
		}
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}
