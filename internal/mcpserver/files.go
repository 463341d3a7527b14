package mcpserver

import (
	"context"
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
		Description: `Read a file in the sandbox's workspace (relative paths start there). A text file comes back as lines from line offset (1-based, default 1), at most limit lines (default 2000), with line numbers in the text; a binary file comes back in base64, from byte offset, at most limit bytes (default 65536).
Also reads the stdout_spill/stderr_spill files exec names.`,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &hintOff},
	}, call(s, s.fileRead))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "file_write",
		Title:       "Write a file",
		Description: `Write a file in the sandbox's workspace, creating missing parent directories and replacing the file atomically (readers see the old or the new content). An existing file keeps its mode unless mode is given.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &hintOn, IdempotentHint: true, OpenWorldHint: &hintOff},
	}, call(s, s.fileWrite))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "file_edit",
		Title:       "Edit a file",
		Description: `Replace an exact string in a text file in the sandbox's workspace. old_string must occur exactly once (include enough surrounding lines to make it unique) unless replace_all is set; otherwise nothing is changed and the call fails saying how many times it occurs.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &hintOn, OpenWorldHint: &hintOff},
	}, call(s, s.fileEdit))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "file_list",
		Title:       "List a directory",
		Description: `List a directory in the sandbox's workspace (default: the workspace itself), depth levels deep (default 1).`,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &hintOff},
	}, call(s, s.fileList))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "file_delete",
		Title:       "Delete a file",
		Description: `Delete a file, symlink or empty directory in the sandbox's workspace; a directory with its contents when recursive is set.`,
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
