package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

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
		Description: `Read a file in the sandbox: any absolute path, or a path relative to the workspace. Returns numbered lines (default: the first 2000; offset and limit pick others). Use it before file_edit, and instead of exec cat/head/sed.
Binary files come back in base64. Also reads the spill files exec names for long output.`,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &hintOff},
	}, call(s, s.fileRead))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "file_write",
		Title:       "Write a file",
		Description: `Create or overwrite a whole file with content (parent directories are made). To change part of an existing file use file_edit instead.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &hintOn, IdempotentHint: true, OpenWorldHint: &hintOff},
	}, call(s, s.fileWrite))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "file_edit",
		Title:       "Edit a file",
		Description: `Replace old_string with new_string in a text file. old_string must match the file's text exactly (whitespace included) and occur once (add surrounding lines to make it unique) unless replace_all is set; otherwise nothing changes and the error says why.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &hintOn, OpenWorldHint: &hintOff},
	}, call(s, s.fileEdit))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "file_list",
		Title:       "List a directory",
		Description: `List a directory (default: the workspace), depth levels deep (default 1). For searching by name or content use exec with find or grep.`,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &hintOff},
	}, call(s, s.fileList))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "file_delete",
		Title:       "Delete a file",
		Description: `Delete a file, symlink or empty directory; a directory with its contents when recursive is set.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &hintOn, IdempotentHint: true, OpenWorldHint: &hintOff},
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

// fileTarget is where a file tool works: the sandbox and, for a path in
// the workspace, the root it works beneath and the path relative to it
// (runboxd's file API); for any other path (view), the absolute path, which
// the view scripts reach as a command does (files_view.go).
type fileTarget struct {
	ref  *sandboxRef
	root string
	rel  string
	view bool
	path string // view: the absolute path
}

// abs is the target's path as the model sees it.
func (t fileTarget) abs() string {
	if t.view {
		return t.path
	}
	return path.Join(t.root, t.rel)
}

// viewed is the same target reached as a command reaches it.
func (t fileTarget) viewed() fileTarget {
	return fileTarget{ref: t.ref, root: t.root, view: true, path: t.abs()}
}

// opts are the client options that confine a call to the root.
func (t fileTarget) opts(more ...client.FileOption) []client.FileOption {
	return append([]client.FileOption{client.InRoot(t.root)}, more...)
}

// escaped says a workspace path left the workspace through a symlink: the
// target is then reached as a command reaches it.
func escaped(err error) bool { return errors.Is(err, runbox.ErrEscapesRoot) }

// target resolves a file tool's sandbox and path: a relative path is taken
// from the workspace; a path in the workspace goes through runboxd's file
// API beneath it, any other through the view scripts. A spill file this
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
	abs := p
	if !path.IsAbs(p) {
		abs = path.Join(root, p)
	}
	abs = path.Clean(abs)
	if abs == root || root == "/" || strings.HasPrefix(abs, root+"/") {
		return fileTarget{ref: ref, root: root, rel: beneath(root, abs)}, nil
	}
	return fileTarget{ref: ref, root: root, view: true, path: abs}, nil
}

// FileListInput is what file_list takes.
type FileListInput struct {
	Path    string `json:"path,omitempty" jsonschema:"the directory (default: the workspace)"`
	Depth   int    `json:"depth,omitempty" jsonschema:"levels (default 1, at most 10)"`
	Sandbox string `json:"sandbox,omitempty" jsonschema:"sandbox id or name (default: this session's)"`
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
	var entries []runbox.FileInfo
	if !t.view {
		entries, err = t.ref.cl.ListDir(ctx, t.rel, t.opts(client.WithDepth(depth))...)
		if escaped(err) {
			t = t.viewed()
		} else if err != nil {
			return nil, FileList{}, st.lost(t.ref, err)
		}
	}
	if t.view {
		fe, more, err := s.viewList(ctx, st, t, depth)
		if err != nil {
			return nil, FileList{}, err
		}
		return listResult(FileList{Path: t.abs(), Entries: fe, Truncated: more})
	}
	out := FileList{Path: t.abs(), Entries: make([]FileEntry, 0, min(len(entries), maxListEntries))}
	for i, e := range entries {
		if i == maxListEntries {
			out.Truncated = true
			break
		}
		out.Entries = append(out.Entries, FileEntry{Path: e.Path, Type: fileType(e), Size: e.Size, Mode: fmt.Sprintf("%04o", octalMode(e.Mode)),
			ModTime: e.ModTime.UTC().Format(time.RFC3339), Target: e.LinkTarget})
	}
	return listResult(out)
}

// listResult renders a listing.
func listResult(out FileList) (*mcp.CallToolResult, FileList, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d entries\n", out.Path, len(out.Entries))
	for _, fe := range out.Entries {
		switch fe.Type {
		case "dir":
			fmt.Fprintf(&b, "%s/\n", fe.Path)
		case "symlink":
			fmt.Fprintf(&b, "%s -> %s\n", fe.Path, fe.Target)
		default:
			fmt.Fprintf(&b, "%s  (%d bytes)\n", fe.Path, fe.Size)
		}
	}
	if out.Truncated {
		b.WriteString("... more entries left out (list a subdirectory, or a smaller depth)\n")
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
	Path      string `json:"path" jsonschema:"absolute, or relative to the workspace"`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"delete a directory with everything in it"`
	Sandbox   string `json:"sandbox,omitempty" jsonschema:"sandbox id or name (default: this session's)"`
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
	if (!t.view && path.Clean(t.rel) == ".") || t.abs() == "/" {
		return nil, FileDeleteResult{}, fmt.Errorf("%w: will not delete %s itself; delete what is in it", runbox.ErrInvalidPath, t.abs())
	}
	if !t.view {
		var opts []client.FileOption
		if in.Recursive {
			opts = append(opts, client.Recursive())
		}
		err = t.ref.cl.Remove(ctx, t.rel, t.opts(opts...)...)
		if escaped(err) {
			t = t.viewed()
		} else if err != nil {
			return nil, FileDeleteResult{}, st.lost(t.ref, err)
		}
	}
	if t.view {
		if err := s.viewDelete(ctx, st, t, in.Recursive); err != nil {
			return nil, FileDeleteResult{}, err
		}
	}
	out := FileDeleteResult{Path: t.abs(), Deleted: true}
	return textResult("deleted " + out.Path), out, nil
}
