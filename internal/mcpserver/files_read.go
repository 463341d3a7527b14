package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// FileReadInput is what file_read takes.
type FileReadInput struct {
	Path    string `json:"path" jsonschema:"absolute, or relative to the workspace"`
	Offset  int64  `json:"offset,omitempty" jsonschema:"first line (1-based; binary: first byte)"`
	Limit   int64  `json:"limit,omitempty" jsonschema:"lines to return (default 2000; binary: bytes)"`
	Sandbox string `json:"sandbox,omitempty" jsonschema:"sandbox id or name (default: this session's)"`
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
	var rc io.ReadCloser
	var info runbox.FileInfo
	if !t.view {
		rc, info, err = t.ref.cl.ReadFile(ctx, t.rel, t.opts()...)
		if escaped(err) {
			t = t.viewed()
		} else if err != nil {
			return nil, FileReadResult{}, st.lost(t.ref, err)
		}
	}
	var whole []byte // a view read: all of the file there is
	if t.view {
		if whole, info.Size, err = s.viewRead(ctx, st, t); err != nil {
			return nil, FileReadResult{}, err
		}
		rc = io.NopCloser(bytes.NewReader(whole))
	}
	defer rc.Close()
	br := bufio.NewReaderSize(rc, sniffBytes)
	head, _ := br.Peek(sniffBytes)
	out := FileReadResult{Path: t.abs(), Size: info.Size}
	if isBinary(head) {
		rc.Close()
		return s.readBinary(ctx, st, t, in, out, whole)
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
func (s *Server) readBinary(ctx context.Context, st *session, t fileTarget, in FileReadInput, out FileReadResult, whole []byte) (*mcp.CallToolResult, FileReadResult, error) {
	limit := in.Limit
	if limit == 0 {
		limit = defaultReadRaw
	}
	limit = min(limit, maxReadBytes)
	var data []byte
	if t.view {
		from := min(in.Offset, int64(len(whole)))
		data = whole[from:min(from+limit, int64(len(whole)))]
	} else {
		rc, _, err := t.ref.cl.ReadFile(ctx, t.rel, t.opts(client.WithRange(in.Offset, limit))...)
		if err != nil {
			return nil, FileReadResult{}, st.lost(t.ref, err)
		}
		defer rc.Close()
		if data, err = io.ReadAll(io.LimitReader(rc, limit)); err != nil {
			return nil, FileReadResult{}, st.lost(t.ref, err)
		}
	}
	out.Binary, out.Base64 = true, base64.StdEncoding.EncodeToString(data)
	out.Truncated = in.Offset+int64(len(data)) < out.Size
	txt := fmt.Sprintf("%s: binary file of %d bytes; bytes %d to %d in content_base64:\n%s",
		out.Path, out.Size, in.Offset, in.Offset+int64(len(data)), out.Base64)
	return textResult(txt), out, nil
}
