package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

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
