package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// Limits of the file tools.
const (
	defaultReadLines = 2000
	maxLineBytes     = 2000      // longer lines are cut (text reads)
	maxReadBytes     = 256 << 10 // what one text read returns at most
	defaultReadRaw   = 64 << 10  // a binary read's default length
	maxEditBytes     = 16 << 20  // file_edit reads the whole file
	defaultListDepth = 1
	maxListDepth     = 10
	maxListEntries   = 2000
	sniffBytes       = 8 << 10 // how much is looked at to tell text from binary
)

func (s *Server) addFileTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "file_read",
		Title: "Read a file",
		Description: `Read a file in the sandbox's workspace (relative paths start there). A text file comes back as lines from line offset (1-based, default 1), at most limit lines (default 2000), with line numbers in the text; a binary file comes back in base64, from byte offset, at most limit bytes (default 65536).
Also reads the stdout_spill/stderr_spill files exec names.`,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no},
	}, call(s, s.fileRead))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "file_write",
		Title:       "Write a file",
		Description: `Write a file in the sandbox's workspace, creating missing parent directories and replacing the file atomically (readers see the old or the new content). An existing file keeps its mode unless mode is given.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no},
	}, call(s, s.fileWrite))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "file_edit",
		Title:       "Edit a file",
		Description: `Replace an exact string in a text file in the sandbox's workspace. old_string must occur exactly once (include enough surrounding lines to make it unique) unless replace_all is set; otherwise nothing is changed and the call fails saying how many times it occurs.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &no},
	}, call(s, s.fileEdit))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "file_list",
		Title:       "List a directory",
		Description: `List a directory in the sandbox's workspace (default: the workspace itself), depth levels deep (default 1).`,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no},
	}, call(s, s.fileList))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "file_delete",
		Title:       "Delete a file",
		Description: `Delete a file, symlink or empty directory in the sandbox's workspace; a directory with its contents when recursive is set.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no},
	}, call(s, s.fileDelete))
}

// beneath maps a path a model gave to one relative to root, the form the
// daemon resolves beneath root: a relative path is taken from root, an
// absolute path inside root is made relative. Any other path is passed on
// as given, and the daemon refuses it with runbox.ErrEscapesRoot (it
// resolves with RESOLVE_BENEATH, so "..", absolute paths and symlinks
// cannot leave root).
func beneath(root, p string) string {
	if p == "" {
		return "."
	}
	if !path.IsAbs(p) {
		return p
	}
	c := path.Clean(p)
	switch {
	case c == root:
		return "."
	case root == "/":
		return strings.TrimPrefix(c, "/")
	case strings.HasPrefix(c, root+"/"):
		return c[len(root)+1:]
	}
	return p
}

// fileTarget is where a file tool works: the sandbox, the root it works
// beneath and the path relative to it.
type fileTarget struct {
	ref  *sandboxRef
	root string
	rel  string
}

// abs is the target's path as the model sees it.
func (t fileTarget) abs() string { return path.Join(t.root, t.rel) }

// opts are the client options that confine a call to the root.
func (t fileTarget) opts(more ...client.FileOption) []client.FileOption {
	return append([]client.FileOption{client.InRoot(t.root)}, more...)
}

// target resolves a file tool's sandbox and path. A spill file this
// session was told of is reached beneath its own directory.
func (st *session) target(ctx context.Context, sandbox, p string) (fileTarget, error) {
	if strings.ContainsRune(p, 0) {
		return fileTarget{}, fmt.Errorf("%w: path has a NUL byte", runbox.ErrInvalidPath)
	}
	ref, err := st.sandbox(ctx, sandbox)
	if err != nil {
		return fileTarget{}, err
	}
	st.mu.Lock()
	spill := st.spills[p]
	st.mu.Unlock()
	if spill {
		return fileTarget{ref: ref, root: path.Dir(p), rel: path.Base(p)}, nil
	}
	root, err := st.root(ctx, ref)
	if err != nil {
		return fileTarget{}, err
	}
	return fileTarget{ref: ref, root: root, rel: beneath(root, p)}, nil
}

// FileReadInput is what file_read takes.
type FileReadInput struct {
	Path    string `json:"path" jsonschema:"the file, relative to the workspace or absolute within it"`
	Offset  int64  `json:"offset,omitempty" jsonschema:"text: first line to return (1-based, default 1); binary: first byte (default 0)"`
	Limit   int64  `json:"limit,omitempty" jsonschema:"text: lines to return (default 2000); binary: bytes (default 65536)"`
	Sandbox string `json:"sandbox,omitempty" jsonschema:"sandbox id or name (default: this session's default sandbox)"`
}

// FileReadResult is what file_read returns.
type FileReadResult struct {
	Path      string `json:"path"`
	Size      int64  `json:"size" jsonschema:"the file's size in bytes"`
	Binary    bool   `json:"binary" jsonschema:"the file is not text: content_base64 holds its bytes"`
	Content   string `json:"content,omitempty" jsonschema:"text: the lines read, without line numbers"`
	Base64    string `json:"content_base64,omitempty" jsonschema:"binary: the bytes read, base64"`
	StartLine int64  `json:"start_line,omitempty" jsonschema:"text: number of the first line returned"`
	EndLine   int64  `json:"end_line,omitempty" jsonschema:"text: number of the last line returned"`
	Truncated bool   `json:"truncated" jsonschema:"more of the file follows what was returned, or long lines were cut"`
}

func (s *Server) fileRead(ctx context.Context, st *session, _ *mcp.CallToolRequest, in FileReadInput) (*mcp.CallToolResult, FileReadResult, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	if in.Offset < 0 || in.Limit < 0 {
		return nil, FileReadResult{}, fmt.Errorf("%w: offset and limit must not be negative", runbox.ErrInvalidSpec)
	}
	t, err := st.target(ctx, in.Sandbox, in.Path)
	if err != nil {
		return nil, FileReadResult{}, err
	}
	rc, info, err := t.ref.cl.ReadFile(ctx, t.rel, t.opts()...)
	if err != nil {
		return nil, FileReadResult{}, st.lost(t.ref, err)
	}
	defer rc.Close()
	br := bufio.NewReaderSize(rc, sniffBytes)
	head, _ := br.Peek(sniffBytes)
	out := FileReadResult{Path: t.abs(), Size: info.Size}
	if isBinary(head) {
		rc.Close()
		return s.readBinary(ctx, st, t, in, out)
	}
	first, limit := max(in.Offset, 1), in.Limit
	if limit == 0 {
		limit = defaultReadLines
	}
	var content, numbered strings.Builder
	line := int64(0)
	for {
		l, cut, err := readLine(br)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, FileReadResult{}, st.lost(t.ref, err)
		}
		line++
		if line < first {
			continue
		}
		if line >= first+limit || content.Len() >= maxReadBytes {
			out.Truncated = true
			break
		}
		if out.StartLine == 0 {
			out.StartLine = line
		}
		out.EndLine = line
		out.Truncated = out.Truncated || cut
		lt := text(l)
		content.WriteString(lt)
		content.WriteByte('\n')
		fmt.Fprintf(&numbered, "%6d\t%s", line, lt)
		if cut {
			numbered.WriteString(" [line cut]")
		}
		numbered.WriteByte('\n')
	}
	out.Content = content.String()
	txt := fmt.Sprintf("%s: lines %d-%d", out.Path, out.StartLine, out.EndLine)
	switch {
	case out.StartLine == 0 && line == 0:
		txt = out.Path + ": empty file"
	case out.StartLine == 0:
		txt = fmt.Sprintf("%s: has %d lines, none from line %d on", out.Path, line, first)
	case out.Truncated:
		txt += fmt.Sprintf(" (more follows: read on with offset %d)", out.EndLine+1)
	}
	return textResult(txt + "\n" + numbered.String()), out, nil
}

// readLine reads one line without its line ending, keeping at most
// maxLineBytes of it (cut says it was longer). io.EOF means no line was
// left.
func readLine(br *bufio.Reader) (line []byte, cut bool, err error) {
	total := 0
	for {
		frag, err := br.ReadSlice('\n')
		total += len(frag)
		if room := maxLineBytes + 2 - len(line); room > 0 { // +2: room for "\r\n"
			line = append(line, frag[:min(len(frag), room)]...)
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && total > 0: // the last line, without a newline
		case err != nil:
			return nil, false, err
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) > maxLineBytes || total > maxLineBytes+2 {
			return line[:min(len(line), maxLineBytes)], true, nil
		}
		return line, false, nil
	}
}

// isBinary tells a file's first bytes from text: a NUL byte, or bytes that
// are not UTF-8 (a rune cut at the end of the sample is fine).
func isBinary(b []byte) bool {
	if bytes.IndexByte(b, 0) >= 0 {
		return true
	}
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			return len(b) >= utf8.UTFMax || utf8.FullRune(b)
		}
		b = b[n:]
	}
	return false
}

// readBinary reads a byte range of a binary file as base64.
func (s *Server) readBinary(ctx context.Context, st *session, t fileTarget, in FileReadInput, out FileReadResult) (*mcp.CallToolResult, FileReadResult, error) {
	limit := in.Limit
	if limit == 0 {
		limit = defaultReadRaw
	}
	limit = min(limit, maxReadBytes)
	rc, _, err := t.ref.cl.ReadFile(ctx, t.rel, t.opts(client.WithRange(in.Offset, limit))...)
	if err != nil {
		return nil, FileReadResult{}, st.lost(t.ref, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, limit))
	if err != nil {
		return nil, FileReadResult{}, st.lost(t.ref, err)
	}
	out.Binary, out.Base64 = true, base64.StdEncoding.EncodeToString(data)
	out.Truncated = in.Offset+int64(len(data)) < out.Size
	txt := fmt.Sprintf("%s: binary file of %d bytes; bytes %d to %d in content_base64:\n%s",
		out.Path, out.Size, in.Offset, in.Offset+int64(len(data)), out.Base64)
	return textResult(txt), out, nil
}

// FileWriteInput is what file_write takes.
type FileWriteInput struct {
	Path          string `json:"path" jsonschema:"the file, relative to the workspace or absolute within it"`
	Content       string `json:"content,omitempty" jsonschema:"the file's new content, as text"`
	ContentBase64 string `json:"content_base64,omitempty" jsonschema:"the file's new content, base64 (instead of content, for bytes that are not text)"`
	Mode          string `json:"mode,omitempty" jsonschema:"permission bits in octal, e.g. 0755 (default: the existing file's, or 0644)"`
	Sandbox       string `json:"sandbox,omitempty" jsonschema:"sandbox id or name (default: this session's default sandbox)"`
}

// FileWriteResult is what file_write returns.
type FileWriteResult struct {
	Path    string `json:"path"`
	Size    int64  `json:"size" jsonschema:"bytes written"`
	Mode    string `json:"mode" jsonschema:"the file's permission bits, octal"`
	Created bool   `json:"created" jsonschema:"the file did not exist before"`
}

func (s *Server) fileWrite(ctx context.Context, st *session, _ *mcp.CallToolRequest, in FileWriteInput) (*mcp.CallToolResult, FileWriteResult, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	data := []byte(in.Content)
	if in.ContentBase64 != "" {
		if in.Content != "" {
			return nil, FileWriteResult{}, fmt.Errorf("%w: give content or content_base64, not both", runbox.ErrInvalidSpec)
		}
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.ContentBase64); err != nil {
			return nil, FileWriteResult{}, fmt.Errorf("%w: content_base64: %v", runbox.ErrInvalidSpec, err)
		}
	}
	var perm fs.FileMode
	if in.Mode != "" {
		m, err := strconv.ParseUint(in.Mode, 8, 32)
		if err != nil || m > 0o7777 {
			return nil, FileWriteResult{}, fmt.Errorf("%w: mode %q: want octal permission bits such as 0644", runbox.ErrInvalidSpec, in.Mode)
		}
		perm = modeFromOctal(uint32(m))
	}
	t, err := st.target(ctx, in.Sandbox, in.Path)
	if err != nil {
		return nil, FileWriteResult{}, err
	}
	info, err := writeKeepingMode(ctx, t, data, perm)
	created := errors.Is(err, errCreated)
	if err != nil && !created {
		return nil, FileWriteResult{}, st.lost(t.ref, err)
	}
	out := FileWriteResult{Path: t.abs(), Size: info.Size, Mode: fmt.Sprintf("%04o", octalMode(info.Mode)), Created: created}
	verb := "wrote"
	if created {
		verb = "created"
	}
	return textResult(fmt.Sprintf("%s %s (%d bytes, mode %s)", verb, out.Path, out.Size, out.Mode)), out, nil
}

// errCreated is how writeKeepingMode says the file is new (with a
// successful write).
var errCreated = errors.New("created")

// writeKeepingMode writes data to the target, with perm, or the mode of
// the file it replaces, or 0644.
func writeKeepingMode(ctx context.Context, t fileTarget, data []byte, perm fs.FileMode) (runbox.FileInfo, error) {
	old, err := t.ref.cl.Stat(ctx, t.rel, t.opts()...)
	created := errors.Is(err, runbox.ErrFileNotFound)
	if err == nil && old.IsSymlink() {
		// The link is replaced, not followed: a new file.
		created = true
	}
	switch {
	case err != nil && !created:
		return runbox.FileInfo{}, err
	case !created && old.IsDir():
		return runbox.FileInfo{}, fmt.Errorf("write %s: %w", t.abs(), runbox.ErrIsDirectory)
	case perm == 0 && !created:
		perm = old.Mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	case perm == 0:
		perm = 0o644
	}
	info, err := t.ref.cl.WriteFile(ctx, t.rel, bytes.NewReader(data), t.opts(client.WithPerm(perm))...)
	if err == nil && created {
		err = errCreated
	}
	return info, err
}

// modeFromOctal turns octal permission bits (with setuid 04000, setgid
// 02000, sticky 01000) into an fs.FileMode.
func modeFromOctal(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// octalMode is modeFromOctal's inverse.
func octalMode(mode fs.FileMode) uint32 {
	m := uint32(mode.Perm())
	if mode&fs.ModeSetuid != 0 {
		m |= 0o4000
	}
	if mode&fs.ModeSetgid != 0 {
		m |= 0o2000
	}
	if mode&fs.ModeSticky != 0 {
		m |= 0o1000
	}
	return m
}

// FileEditInput is what file_edit takes.
type FileEditInput struct {
	Path       string `json:"path" jsonschema:"the file, relative to the workspace or absolute within it"`
	OldString  string `json:"old_string" jsonschema:"the exact text to replace"`
	NewString  string `json:"new_string" jsonschema:"the text to put in its place"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence (default: old_string must occur exactly once)"`
	Sandbox    string `json:"sandbox,omitempty" jsonschema:"sandbox id or name (default: this session's default sandbox)"`
}

// FileEditResult is what file_edit returns.
type FileEditResult struct {
	Path         string `json:"path"`
	Replacements int    `json:"replacements" jsonschema:"occurrences replaced"`
	Size         int64  `json:"size" jsonschema:"the file's size afterwards"`
}

// ErrAmbiguousEdit means file_edit's old_string occurs more than once and
// replace_all was not set; the file is unchanged.
var ErrAmbiguousEdit = errors.New("old_string is not unique")

// ErrNoMatch means file_edit's old_string does not occur; the file is
// unchanged.
var ErrNoMatch = errors.New("old_string not found")

func (s *Server) fileEdit(ctx context.Context, st *session, _ *mcp.CallToolRequest, in FileEditInput) (*mcp.CallToolResult, FileEditResult, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	switch {
	case in.OldString == "":
		return nil, FileEditResult{}, fmt.Errorf("%w: old_string is empty (use file_write to write a whole file)", runbox.ErrInvalidSpec)
	case in.OldString == in.NewString:
		return nil, FileEditResult{}, fmt.Errorf("%w: old_string and new_string are the same", runbox.ErrInvalidSpec)
	}
	t, err := st.target(ctx, in.Sandbox, in.Path)
	if err != nil {
		return nil, FileEditResult{}, err
	}
	rc, info, err := t.ref.cl.ReadFile(ctx, t.rel, t.opts()...)
	if err != nil {
		return nil, FileEditResult{}, st.lost(t.ref, err)
	}
	data, err := io.ReadAll(io.LimitReader(rc, maxEditBytes+1))
	rc.Close()
	switch {
	case err != nil:
		return nil, FileEditResult{}, st.lost(t.ref, err)
	case len(data) > maxEditBytes:
		return nil, FileEditResult{}, fmt.Errorf("%w: %s is larger than %d MiB: edit it with exec (sed, patch)", runbox.ErrTooLarge, t.abs(), maxEditBytes>>20)
	}
	content := string(data)
	n := strings.Count(content, in.OldString)
	switch {
	case n == 0:
		return nil, FileEditResult{}, fmt.Errorf("%w in %s: nothing changed (file_read shows the file's exact text)", ErrNoMatch, t.abs())
	case n > 1 && !in.ReplaceAll:
		return nil, FileEditResult{}, fmt.Errorf("%w: it occurs %d times in %s; nothing changed: include more surrounding lines in old_string to pick one, or set replace_all", ErrAmbiguousEdit, n, t.abs())
	}
	if !in.ReplaceAll {
		content = strings.Replace(content, in.OldString, in.NewString, 1)
	} else {
		content = strings.ReplaceAll(content, in.OldString, in.NewString)
	}
	perm := info.Mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	after, err := t.ref.cl.WriteFile(ctx, t.rel, strings.NewReader(content), t.opts(client.WithPerm(perm))...)
	if err != nil {
		return nil, FileEditResult{}, st.lost(t.ref, err)
	}
	out := FileEditResult{Path: t.abs(), Replacements: n, Size: after.Size}
	return textResult(fmt.Sprintf("edited %s: %d replacement(s)", out.Path, n)), out, nil
}

// FileListInput is what file_list takes.
type FileListInput struct {
	Path    string `json:"path,omitempty" jsonschema:"the directory (default: the workspace)"`
	Depth   int    `json:"depth,omitempty" jsonschema:"levels to list (default 1: the directory's own entries; at most 10)"`
	Sandbox string `json:"sandbox,omitempty" jsonschema:"sandbox id or name (default: this session's default sandbox)"`
}

// FileEntry is one entry of file_list.
type FileEntry struct {
	Path    string `json:"path" jsonschema:"relative to the directory listed"`
	Type    string `json:"type" jsonschema:"file, dir, symlink or other"`
	Size    int64  `json:"size"`
	Mode    string `json:"mode" jsonschema:"permission bits, octal"`
	ModTime string `json:"mtime" jsonschema:"RFC 3339"`
	Target  string `json:"target,omitempty" jsonschema:"a symlink's target"`
}

// FileList is what file_list returns.
type FileList struct {
	Path      string      `json:"path"`
	Entries   []FileEntry `json:"entries"`
	Truncated bool        `json:"truncated" jsonschema:"there were more entries than returned"`
}

func (s *Server) fileList(ctx context.Context, st *session, _ *mcp.CallToolRequest, in FileListInput) (*mcp.CallToolResult, FileList, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	depth := in.Depth
	switch {
	case depth < 0:
		return nil, FileList{}, fmt.Errorf("%w: depth must not be negative", runbox.ErrInvalidSpec)
	case depth == 0:
		depth = defaultListDepth
	}
	depth = min(depth, maxListDepth)
	t, err := st.target(ctx, in.Sandbox, in.Path)
	if err != nil {
		return nil, FileList{}, err
	}
	entries, err := t.ref.cl.ListDir(ctx, t.rel, t.opts(client.WithDepth(depth))...)
	if err != nil {
		return nil, FileList{}, st.lost(t.ref, err)
	}
	out := FileList{Path: t.abs(), Entries: make([]FileEntry, 0, min(len(entries), maxListEntries))}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d entries\n", out.Path, len(entries))
	for i, e := range entries {
		if i == maxListEntries {
			out.Truncated = true
			fmt.Fprintf(&b, "... %d more (list a subdirectory, or a smaller depth)\n", len(entries)-i)
			break
		}
		fe := FileEntry{Path: e.Path, Type: fileType(e), Size: e.Size, Mode: fmt.Sprintf("%04o", octalMode(e.Mode)),
			ModTime: e.ModTime.UTC().Format(time.RFC3339), Target: e.LinkTarget}
		out.Entries = append(out.Entries, fe)
		switch fe.Type {
		case "dir":
			fmt.Fprintf(&b, "%s/\n", fe.Path)
		case "symlink":
			fmt.Fprintf(&b, "%s -> %s\n", fe.Path, fe.Target)
		default:
			fmt.Fprintf(&b, "%s  (%d bytes)\n", fe.Path, fe.Size)
		}
	}
	return textResult(b.String()), out, nil
}

func fileType(fi runbox.FileInfo) string {
	switch {
	case fi.IsDir():
		return "dir"
	case fi.IsSymlink():
		return "symlink"
	case fi.IsRegular():
		return "file"
	}
	return "other"
}

// FileDeleteInput is what file_delete takes.
type FileDeleteInput struct {
	Path      string `json:"path" jsonschema:"the file or directory, relative to the workspace or absolute within it"`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"delete a directory with everything in it"`
	Sandbox   string `json:"sandbox,omitempty" jsonschema:"sandbox id or name (default: this session's default sandbox)"`
}

// FileDeleteResult is what file_delete returns.
type FileDeleteResult struct {
	Path    string `json:"path"`
	Deleted bool   `json:"deleted"`
}

func (s *Server) fileDelete(ctx context.Context, st *session, _ *mcp.CallToolRequest, in FileDeleteInput) (*mcp.CallToolResult, FileDeleteResult, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	t, err := st.target(ctx, in.Sandbox, in.Path)
	if err != nil {
		return nil, FileDeleteResult{}, err
	}
	if path.Clean(t.rel) == "." {
		return nil, FileDeleteResult{}, fmt.Errorf("%w: will not delete the workspace itself (%s); delete what is in it", runbox.ErrInvalidPath, t.root)
	}
	var opts []client.FileOption
	if in.Recursive {
		opts = append(opts, client.Recursive())
	}
	if err := t.ref.cl.Remove(ctx, t.rel, t.opts(opts...)...); err != nil {
		return nil, FileDeleteResult{}, st.lost(t.ref, err)
	}
	out := FileDeleteResult{Path: t.abs(), Deleted: true}
	return textResult("deleted " + out.Path), out, nil
}
