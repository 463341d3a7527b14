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
	Path     string `json:"path" jsonschema:"absolute, or relative to the workspace"`
	Content  string `json:"content" jsonschema:"the whole new content"`
	Encoding string `json:"encoding,omitempty" jsonschema:"base64 when content is base64 (bytes that are not text)"`
	Mode     string `json:"mode,omitempty" jsonschema:"octal permission bits, e.g. 0755 (default: the file's, or 0644)"`
	Sandbox  string `json:"sandbox,omitempty" jsonschema:"sandbox id or name (default: this session's)"`
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
	switch in.Encoding {
	case "", "utf-8", "text":
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, FileWriteResult{}, fmt.Errorf("%w: content is not base64: %v", runbox.ErrInvalidSpec, err)
		}
	default:
		return nil, FileWriteResult{}, fmt.Errorf("%w: encoding %q: want base64, or none for text", runbox.ErrInvalidSpec, in.Encoding)
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
	var info runbox.FileInfo
	created := false
	if !t.view {
		info, err = writeKeepingMode(ctx, t, data, perm)
		created = errors.Is(err, errCreated)
		if escaped(err) {
			t = t.viewed()
		} else if err != nil && !created {
			return nil, FileWriteResult{}, st.lost(t.ref, err)
		}
	}
	if t.view {
		if info, created, err = s.viewWrite(ctx, st, t, data, in.Mode); err != nil {
			return nil, FileWriteResult{}, err
		}
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

// readWhole reads a workspace file for file_edit, at most maxEditBytes+1
// bytes of it.
func readWhole(ctx context.Context, t fileTarget) ([]byte, runbox.FileInfo, error) {
	rc, info, err := t.ref.cl.ReadFile(ctx, t.rel, t.opts()...)
	if err != nil {
		return nil, info, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxEditBytes+1))
	return data, info, err
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
	Path       string `json:"path" jsonschema:"absolute, or relative to the workspace"`
	OldString  string `json:"old_string" jsonschema:"the exact text to replace, unique in the file"`
	NewString  string `json:"new_string" jsonschema:"its replacement"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence"`
	Sandbox    string `json:"sandbox,omitempty" jsonschema:"sandbox id or name (default: this session's)"`
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
	var data []byte
	var info runbox.FileInfo
	if !t.view {
		data, info, err = readWhole(ctx, t)
		if escaped(err) {
			t = t.viewed()
		} else if err != nil {
			return nil, FileEditResult{}, st.lost(t.ref, err)
		}
	}
	if t.view {
		var size int64
		if data, size, err = s.viewRead(ctx, st, t); err != nil {
			return nil, FileEditResult{}, err
		}
		if size > int64(len(data)) {
			data = make([]byte, maxEditBytes+1) // too large: said below
		}
	}
	switch {
	case len(data) > maxEditBytes, t.view && len(data) >= viewReadBytes:
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
	var after runbox.FileInfo
	if t.view {
		if after, _, err = s.viewWrite(ctx, st, t, []byte(content), ""); err != nil {
			return nil, FileEditResult{}, err
		}
	} else {
		perm := info.Mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		if after, err = t.ref.cl.WriteFile(ctx, t.rel, strings.NewReader(content), t.opts(client.WithPerm(perm))...); err != nil {
			return nil, FileEditResult{}, st.lost(t.ref, err)
		}
	}
	out := FileEditResult{Path: t.abs(), Replacements: n, Size: after.Size}
	return textResult(fmt.Sprintf("edited %s: %d replacement(s)", out.Path, n)), out, nil
}
