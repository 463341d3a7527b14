package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
	"github.com/runbox/runbox/internal/files"
)

// fileChunk is the data one message of a file or archive stream carries.
const fileChunk = 256 << 10

// FileOption configures a file operation; each operation documents the
// options it honours and ignores the others.
type FileOption func(*fileOptions)

type fileOptions struct {
	root           string
	offset, length int64
	perm           fs.FileMode
	noParents      bool
	inPlace        bool
	recursive      bool
	depth          int
	follow         bool
	progress       func(n int64)
	// for archives
	name    string
	entries []string
	deletes []string
	chtimes []runbox.FileInfo
	exclude []string
}

func fileOpts(opts []FileOption) fileOptions {
	var o fileOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// InRoot resolves the operation's paths beneath dir in the sandbox: "..",
// absolute paths and symlinks cannot leave it (runbox.ErrEscapesRoot).
func InRoot(dir string) FileOption { return func(o *fileOptions) { o.root = dir } }

// WithRange reads length bytes from offset (ReadFile); length 0 reads to
// the end.
func WithRange(offset, length int64) FileOption {
	return func(o *fileOptions) { o.offset, o.length = offset, length }
}

// WithPerm sets the mode of a file written (default 0644) or a directory
// made (default 0755), exactly, without a umask.
func WithPerm(perm fs.FileMode) FileOption { return func(o *fileOptions) { o.perm = perm } }

// NoParents makes WriteFile and MakeDir fail when the parent directory is
// missing, instead of creating it (and MakeDir fail when the directory
// exists).
func NoParents() FileOption { return func(o *fileOptions) { o.noParents = true } }

// InPlace makes WriteFile truncate and write the existing file rather than
// replace it atomically.
func InPlace() FileOption { return func(o *fileOptions) { o.inPlace = true } }

// Recursive makes Remove remove a whole tree and ListDir list one.
func Recursive() FileOption { return func(o *fileOptions) { o.recursive = true } }

// WithDepth makes ListDir recursive down to n levels (1: the directory's own
// entries).
func WithDepth(n int) FileOption { return func(o *fileOptions) { o.recursive, o.depth = true, n } }

// FollowLinks makes Stat describe what a final symlink points to.
func FollowLinks() FileOption { return func(o *fileOptions) { o.follow = true } }

// WithProgress calls fn with the number of file bytes transferred since
// its last call, during ReadFile, WriteFile, archives, CopyTo and CopyFrom.
func WithProgress(fn func(n int64)) FileOption { return func(o *fileOptions) { o.progress = fn } }

// WithExclude leaves out entries matching .gitignore-style patterns
// (GetArchive, CopyFrom, CopyTo).
func WithExclude(patterns ...string) FileOption {
	return func(o *fileOptions) { o.exclude = append(o.exclude, patterns...) }
}

// ArchiveStats counts what an extraction wrote.
type ArchiveStats struct {
	Files, Dirs, Links int
	Bytes              int64
	Deleted            int
	// Stripped counts the entries a pull wrote without the setuid or
	// setgid bit they had in the sandbox: runbox never makes either.
	Stripped int
}

// fileError wraps a failed file call's error as a *runbox.Error. A request
// the client could not encode is, for the files API, a path that is not
// UTF-8 (its requests carry paths as text): runbox.ErrInvalidPath.
func (c *Client) fileError(op string, ctx context.Context, err error) error {
	if errors.Is(err, errUnencodable) {
		return &runbox.Error{Op: op, Sandbox: c.sandbox, Err: fmt.Errorf(
			"%w: the files API takes UTF-8 paths (file names that are not UTF-8 can be reached through archives or an exec): %v",
			runbox.ErrInvalidPath, err)}
	}
	return c.opError(op, "", ctx, err)
}

// ReadFile opens the file at path in the sandbox for reading as a stream
// and returns it with the file's info. Close the reader when done.
// Options: InRoot, WithRange, WithProgress.
func (c *Client) ReadFile(ctx context.Context, p string, opts ...FileOption) (io.ReadCloser, runbox.FileInfo, error) {
	o := fileOpts(opts)
	ctx, cancel := c.callContext(ctx)
	stream, err := c.files().ReadFile(ctx, connect.NewRequest(&runboxv1.ReadFileRequest{
		Root: o.root, Path: p, Offset: o.offset, Length: o.length,
	}))
	if err != nil {
		err = c.fileError("read file", ctx, err) // before cancel, which would make it ctx's error
		cancel()
		return nil, runbox.FileInfo{}, err
	}
	if !stream.Receive() {
		err := stream.Err()
		stream.Close()
		if err == nil {
			err = fmt.Errorf("read %s: %w", p, io.ErrUnexpectedEOF)
		}
		err = c.fileError("read file", ctx, err) // before cancel, as above
		cancel()
		return nil, runbox.FileInfo{}, err
	}
	info := wire.FileInfoFromProto(stream.Msg().GetInfo())
	r := &dataStream[runboxv1.ReadFileResponse, *runboxv1.ReadFileResponse]{
		c: c, op: "read file", ctx: ctx, cancel: cancel, stream: stream, cur: stream.Msg().GetData(), progress: o.progress,
	}
	return r, info, nil
}

// receiveEntries collects the entries of every message of a ListDir or
// Manifest stream, and closes it.
func receiveEntries[M any, PM interface {
	*M
	GetEntries() []*runboxv1.FileInfo
}](stream *connect.ServerStreamForClient[M]) ([]runbox.FileInfo, error) {
	defer stream.Close()
	var out []runbox.FileInfo
	for stream.Receive() {
		for _, e := range PM(stream.Msg()).GetEntries() {
			out = append(out, wire.FileInfoFromProto(e))
		}
	}
	return out, stream.Err()
}

// dataStream reads the data fields of a server stream's messages (a
// ReadFile or GetArchive stream) as one byte stream; op names the call in
// its errors.
type dataStream[M any, PM interface {
	*M
	GetData() []byte
}] struct {
	c        *Client
	op       string
	ctx      context.Context
	cancel   context.CancelFunc
	stream   *connect.ServerStreamForClient[M]
	cur      []byte
	err      error
	progress func(int64)
}

func (r *dataStream[M, PM]) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if !r.stream.Receive() {
			r.err = io.EOF
			if err := r.stream.Err(); err != nil {
				r.err = r.c.fileError(r.op, r.ctx, err)
			}
			continue
		}
		r.cur = PM(r.stream.Msg()).GetData()
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	if r.progress != nil {
		r.progress(int64(n))
	}
	return n, nil
}

// Close ends the stream (early, if it is not read to the end).
func (r *dataStream[M, PM]) Close() error {
	r.stream.Close()
	r.cancel()
	return nil
}

// WriteFile writes r to the file at path in the sandbox and returns its
// info afterwards. By default it creates missing parent directories and
// replaces the file atomically (readers see the old or the new content; a
// symlink at path is replaced, not followed). Options: InRoot, WithPerm,
// NoParents, InPlace, WithProgress.
func (c *Client) WriteFile(ctx context.Context, p string, r io.Reader, opts ...FileOption) (runbox.FileInfo, error) {
	o := fileOpts(opts)
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	stream := c.files().WriteFile(ctx)
	hdr := &runboxv1.WriteFileHeader{Root: o.root, Path: p, Mode: wire.ModeToProto(o.perm),
		CreateParents: !o.noParents, InPlace: o.inPlace}
	var sendErr error
	if err := stream.Send(&runboxv1.WriteFileRequest{Msg: &runboxv1.WriteFileRequest_Header{Header: hdr}}); err != nil {
		sendErr = err
	} else {
		w := &chunkSender{send: func(b []byte) error {
			return stream.Send(&runboxv1.WriteFileRequest{Msg: &runboxv1.WriteFileRequest_Data{Data: b}})
		}, progress: o.progress}
		sendErr = w.copyFrom(r)
	}
	resp, err := stream.CloseAndReceive()
	if err != nil {
		return runbox.FileInfo{}, c.fileError("write file", ctx, err)
	}
	if sendErr != nil && !errors.Is(sendErr, io.EOF) {
		return runbox.FileInfo{}, c.fileError("write file", ctx, sendErr)
	}
	return wire.FileInfoFromProto(resp.Msg.GetInfo()), nil
}

// chunkSender sends what it reads in messages of at most fileChunk bytes.
// A send failing with io.EOF means the daemon ended the call: its answer
// (CloseAndReceive) says why.
type chunkSender struct {
	send     func([]byte) error
	progress func(int64)
	buf      []byte
	err      error // the first send error; later writes fail with it
}

// copyFrom sends all of r.
func (w *chunkSender) copyFrom(r io.Reader) error {
	buf := make([]byte, fileChunk)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if serr := w.send(buf[:n]); serr != nil {
				return serr
			}
			if w.progress != nil {
				w.progress(int64(n))
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Write buffers p and sends full chunks (as an io.Writer for tar).
func (w *chunkSender) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.buf == nil {
		w.buf = make([]byte, 0, fileChunk)
	}
	n := 0
	for len(p) > 0 {
		k := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf = w.buf[:len(w.buf)+k]
		p, n = p[k:], n+k
		if len(w.buf) == cap(w.buf) {
			if err := w.Flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// Flush sends what is buffered.
func (w *chunkSender) Flush() error {
	if w.err != nil || len(w.buf) == 0 {
		return w.err
	}
	w.err = w.send(w.buf)
	w.buf = w.buf[:0]
	return w.err
}

// Stat describes path in the sandbox; a final symlink is described, not
// followed, unless FollowLinks. Options: InRoot, FollowLinks.
func (c *Client) Stat(ctx context.Context, p string, opts ...FileOption) (runbox.FileInfo, error) {
	o := fileOpts(opts)
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	resp, err := c.files().Stat(ctx, connect.NewRequest(&runboxv1.StatRequest{Root: o.root, Path: p, FollowLinks: o.follow}))
	if err != nil {
		return runbox.FileInfo{}, c.fileError("stat", ctx, err)
	}
	return wire.FileInfoFromProto(resp.Msg.GetInfo()), nil
}

// ListDir lists the directory at path in the sandbox (paths relative to
// it), in lexical order; with Recursive or WithDepth, the tree beneath it,
// parents before children. Symlinks are listed, never followed. Options:
// InRoot, Recursive, WithDepth.
func (c *Client) ListDir(ctx context.Context, p string, opts ...FileOption) ([]runbox.FileInfo, error) {
	o := fileOpts(opts)
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	stream, err := c.files().ListDir(ctx, connect.NewRequest(&runboxv1.ListDirRequest{
		Root: o.root, Path: p, Recursive: o.recursive, Depth: int32(o.depth),
	}))
	if err != nil {
		return nil, c.fileError("list", ctx, err)
	}
	out, err := receiveEntries(stream)
	if err != nil {
		return nil, c.fileError("list", ctx, err)
	}
	return out, nil
}

// MakeDir creates the directory path in the sandbox, with its missing
// parents, like mkdir -p (an existing directory is fine); with NoParents,
// like mkdir. Options: InRoot, WithPerm, NoParents.
func (c *Client) MakeDir(ctx context.Context, p string, opts ...FileOption) error {
	o := fileOpts(opts)
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	_, err := c.files().MakeDir(ctx, connect.NewRequest(&runboxv1.MakeDirRequest{
		Root: o.root, Path: p, Mode: wire.ModeToProto(o.perm), Parents: !o.noParents,
	}))
	return c.fileError("mkdir", ctx, err)
}

// Remove removes path in the sandbox: a file, a symlink (never what it
// points to) or an empty directory; with Recursive, a whole tree. A missing
// path is runbox.ErrFileNotFound. Options: InRoot, Recursive.
func (c *Client) Remove(ctx context.Context, p string, opts ...FileOption) error {
	o := fileOpts(opts)
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	_, err := c.files().Remove(ctx, connect.NewRequest(&runboxv1.RemoveRequest{Root: o.root, Path: p, Recursive: o.recursive}))
	return c.fileError("remove", ctx, err)
}

// Move renames from to to in the sandbox, replacing to when it is a file.
// Options: InRoot.
func (c *Client) Move(ctx context.Context, from, to string, opts ...FileOption) error {
	o := fileOpts(opts)
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	_, err := c.files().Move(ctx, connect.NewRequest(&runboxv1.MoveRequest{Root: o.root, From: from, To: to}))
	return c.fileError("move", ctx, err)
}

// PutArchive extracts the tar stream r under the directory dir in the
// sandbox (created with its parents when missing), in constant memory on
// both ends. Modes, mtimes and symlinks (as links) are preserved; an entry
// that would land outside dir (an absolute or ".." name, a path through a
// symlink leading out, a hard link to outside) fails the call with
// runbox.ErrEscapesRoot, and nothing is written outside dir. Options:
// InRoot, WithProgress (bytes of tar stream sent).
func (c *Client) PutArchive(ctx context.Context, dir string, r io.Reader, opts ...FileOption) (ArchiveStats, error) {
	o := fileOpts(opts)
	return c.putArchive(ctx, dir, o, func(w io.Writer) error {
		_, err := io.Copy(w, r)
		return err
	})
}

// putArchive streams what write writes as a PutArchive call.
func (c *Client) putArchive(ctx context.Context, dir string, o fileOptions, write func(w io.Writer) error) (ArchiveStats, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	stream := c.files().PutArchive(ctx)
	del := make([][]byte, len(o.deletes))
	for i, d := range o.deletes {
		del[i] = []byte(d)
	}
	hdr := &runboxv1.PutArchiveHeader{Root: o.root, Path: dir, Delete: del}
	for _, c := range o.chtimes {
		hdr.Chtimes = append(hdr.Chtimes, wire.FileInfoToProto(c))
	}
	sendErr := stream.Send(&runboxv1.PutArchiveRequest{Msg: &runboxv1.PutArchiveRequest_Header{Header: hdr}})
	if sendErr == nil {
		w := &chunkSender{send: func(b []byte) error {
			return stream.Send(&runboxv1.PutArchiveRequest{Msg: &runboxv1.PutArchiveRequest_Data{Data: b}})
		}}
		sendErr = write(w)
		if sendErr == nil {
			sendErr = w.Flush()
		}
	}
	if sendErr != nil && !errors.Is(sendErr, io.EOF) {
		// Our side failed (reading local files): abandon the call so the
		// daemon does not extract a truncated archive.
		cancel()
		stream.CloseAndReceive()
		return ArchiveStats{}, c.fileError("put archive", nil, sendErr)
	}
	resp, err := stream.CloseAndReceive()
	if err != nil {
		return ArchiveStats{}, c.fileError("put archive", ctx, err)
	}
	m := resp.Msg
	return ArchiveStats{Files: int(m.GetFiles()), Dirs: int(m.GetDirs()), Links: int(m.GetLinks()),
		Bytes: m.GetBytes(), Deleted: int(m.GetDeleted())}, nil
}

// GetArchive writes path in the sandbox (a tree, a file or a symlink) to w
// as a tar stream, entries named relative to path. Symlinks are archived as
// links, never followed. Options: InRoot, WithExclude, WithProgress (bytes
// of tar stream received).
func (c *Client) GetArchive(ctx context.Context, p string, w io.Writer, opts ...FileOption) error {
	o := fileOpts(opts)
	r, err := c.getArchive(ctx, p, o)
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = io.Copy(w, r)
	return err
}

// getArchive opens a GetArchive stream as a reader.
func (c *Client) getArchive(ctx context.Context, p string, o fileOptions) (io.ReadCloser, error) {
	ctx, cancel := c.callContext(ctx)
	entries := make([][]byte, len(o.entries))
	for i, e := range o.entries {
		entries[i] = []byte(e)
	}
	stream, err := c.files().GetArchive(ctx, connect.NewRequest(&runboxv1.GetArchiveRequest{
		Root: o.root, Path: p, Name: o.name, Entries: entries, Exclude: o.exclude,
	}))
	if err != nil {
		cancel()
		return nil, c.fileError("get archive", ctx, err)
	}
	return &dataStream[runboxv1.GetArchiveResponse, *runboxv1.GetArchiveResponse]{
		c: c, op: "get archive", ctx: ctx, cancel: cancel, stream: stream, progress: o.progress,
	}, nil
}

// CopyTo copies the local file, symlink or directory tree src into the
// sandbox at dst, like docker cp: when dst is an existing directory, src
// lands inside it under its own name; otherwise dst names the copy (its
// parent is created when missing). Modes, mtimes and symlinks (as links)
// are preserved; nothing is followed out of src. Options: InRoot (for dst),
// WithExclude, WithProgress.
func (c *Client) CopyTo(ctx context.Context, src, dst string, opts ...FileOption) (ArchiveStats, error) {
	o := fileOpts(opts)
	abs, err := filepath.Abs(src)
	if err != nil {
		return ArchiveStats{}, c.fileError("copy", nil, err)
	}
	parent, base := filepath.Split(abs)
	if base == "" {
		return ArchiveStats{}, c.fileError("copy", nil, fmt.Errorf("copy %s: %w: cannot copy the file system root", src, runbox.ErrInvalidPath))
	}
	lfs, err := files.Open(parent)
	if err != nil {
		return ArchiveStats{}, c.fileError("copy", nil, err)
	}
	defer lfs.Close()
	sfi, err := lfs.Stat(base, false)
	if err != nil {
		return ArchiveStats{}, c.fileError("copy", nil, err)
	}
	dir, name := path.Dir(path.Clean(dst)), path.Base(path.Clean(dst))
	dfi, err := c.Stat(ctx, dst, InRoot(o.root), FollowLinks())
	switch {
	case err == nil && dfi.IsDir():
		dir, name = dst, base
	case err == nil && sfi.IsDir():
		return ArchiveStats{}, c.fileError("copy", nil, fmt.Errorf("copy %s to %s: %w: cannot copy a directory onto a file", src, dst, runbox.ErrNotDirectory))
	case err != nil && !errors.Is(err, runbox.ErrFileNotFound):
		return ArchiveStats{}, err
	}
	ex, err := files.NewMatcher(o.exclude)
	if err != nil {
		return ArchiveStats{}, c.fileError("copy", nil, err)
	}
	o.name = name
	return c.putArchive(ctx, dir, o, func(w io.Writer) error {
		return lfs.Archive(w, base, files.ArchiveOptions{Name: name, Exclude: ex, Progress: o.progress})
	})
}

// CopyFrom copies the file, symlink or directory tree src in the sandbox to
// the local path dst, like docker cp: when dst is an existing directory, src
// lands inside it under its own name; otherwise dst names the copy. Nothing
// is written outside the copy, whatever the archive holds
// (a symlink in src pointing at /etc is copied as a link, and nothing is
// written through it); names this machine cannot represent fail the copy
// with runbox.ErrInvalidPath. Options: InRoot (for src), WithExclude,
// WithProgress.
func (c *Client) CopyFrom(ctx context.Context, src, dst string, opts ...FileOption) (ArchiveStats, error) {
	o := fileOpts(opts)
	base := path.Base(path.Clean(src))
	if base == "/" || base == "." || base == ".." {
		return ArchiveStats{}, c.fileError("copy", nil, fmt.Errorf("copy %s: %w: name the directory to copy", src, runbox.ErrInvalidPath))
	}
	dir, name := filepath.Dir(dst), filepath.Base(dst)
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		dir, name = dst, base
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return ArchiveStats{}, c.fileError("copy", nil, err)
	}
	lfs, err := files.Open(dir)
	if err != nil {
		return ArchiveStats{}, c.fileError("copy", nil, err)
	}
	defer lfs.Close()
	o.name = name
	prog := o.progress
	o.progress = nil
	r, err := c.getArchive(ctx, src, o)
	if err != nil {
		return ArchiveStats{}, err
	}
	defer r.Close()
	st, err := lfs.Extract(r, files.ExtractOptions{Progress: prog, Within: name})
	if err != nil {
		return ArchiveStats{}, c.fileError("copy", nil, err)
	}
	return ArchiveStats{Files: int(st.Files), Dirs: int(st.Dirs), Links: int(st.Links), Bytes: st.Bytes, Deleted: int(st.Deleted), Stripped: int(st.Stripped)}, nil
}
