package mcpserver_test

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/runbox/runbox/internal/mcpserver/mcptest"
)

// The file tools write, read (with line numbers, offset and limit), edit,
// list and delete files beneath the workspace, as the host sees them.
func TestFileTools(t *testing.T) {
	s := startStdio(t)
	type written struct {
		Path    string `json:"path"`
		Size    int64  `json:"size"`
		Mode    string `json:"mode"`
		Created bool   `json:"created"`
	}
	w := ok[written](t, s.cs, "file_write", map[string]any{"path": "src/main.txt", "content": "alpha\nbeta\ngamma\nbeta\n"})
	if w.Path != filepath.Join(s.workdir, "src/main.txt") || w.Size != 22 || !w.Created || w.Mode != "0644" {
		t.Errorf("file_write: %+v", w)
	}
	onHost := func() string {
		b, err := os.ReadFile(filepath.Join(s.workdir, "src/main.txt"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := onHost(); got != "alpha\nbeta\ngamma\nbeta\n" {
		t.Errorf("on the host: %q", got)
	}

	// Reads: the whole file, numbered in the text; a window by lines; an
	// absolute path inside the workspace is the same file.
	res := s.call(t, "file_read", map[string]any{"path": "src/main.txt"})
	if txt := mcptest.ResultText(res); !strings.Contains(txt, "     2\tbeta\n") || !strings.Contains(txt, "     4\tbeta\n") {
		t.Errorf("numbered text: %q", txt)
	}
	r := decode[fileRead](t, res)
	if r.Content != "alpha\nbeta\ngamma\nbeta\n" || r.StartLine != 1 || r.EndLine != 4 || r.Truncated || r.Binary {
		t.Errorf("file_read: %+v", r)
	}
	r = ok[fileRead](t, s.cs, "file_read", map[string]any{"path": filepath.Join(s.workdir, "src/main.txt"), "offset": 2, "limit": 2})
	if r.Content != "beta\ngamma\n" || r.StartLine != 2 || r.EndLine != 3 || !r.Truncated {
		t.Errorf("lines 2-3: %+v", r)
	}

	// An ambiguous edit is refused and changes nothing.
	msg := failing(t, s.cs, "file_edit", map[string]any{"path": "src/main.txt", "old_string": "beta", "new_string": "BETA"})
	if !strings.Contains(msg, "occurs 2 times") {
		t.Errorf("ambiguous edit: %q", msg)
	}
	if got := onHost(); got != "alpha\nbeta\ngamma\nbeta\n" {
		t.Errorf("an ambiguous edit changed the file: %q", got)
	}
	if msg := failing(t, s.cs, "file_edit", map[string]any{"path": "src/main.txt", "old_string": "delta", "new_string": "x"}); !strings.Contains(msg, "not found") {
		t.Errorf("edit of a missing string: %q", msg)
	}
	type edited struct {
		Replacements int `json:"replacements"`
	}
	if e := ok[edited](t, s.cs, "file_edit", map[string]any{"path": "src/main.txt", "old_string": "beta\ngamma", "new_string": "B\nG"}); e.Replacements != 1 {
		t.Errorf("unique edit: %+v", e)
	}
	if e := ok[edited](t, s.cs, "file_edit", map[string]any{"path": "src/main.txt", "old_string": "a", "new_string": "4", "replace_all": true}); e.Replacements != 3 {
		t.Errorf("replace_all: %+v", e)
	}
	if got := onHost(); got != "4lph4\nB\nG\nbet4\n" {
		t.Errorf("after the edits: %q", got)
	}

	// An edit and a rewrite keep an executable's mode.
	ok[written](t, s.cs, "file_write", map[string]any{"path": "run.sh", "content": "#!/bin/sh\necho one\n", "mode": "0755"})
	ok[edited](t, s.cs, "file_edit", map[string]any{"path": "run.sh", "old_string": "one", "new_string": "two"})
	if w := ok[written](t, s.cs, "file_write", map[string]any{"path": "run.sh", "content": "#!/bin/sh\necho three\n"}); w.Mode != "0755" || w.Created {
		t.Errorf("rewrite: %+v", w)
	}
	if r := ok[execResult](t, s.cs, "exec", map[string]any{"command": "./run.sh"}); r.Stdout != "three\n" {
		t.Errorf("./run.sh: %+v", r)
	}

	// Binary content round-trips through base64.
	bin := []byte{0, 1, 2, 0xff, 0xfe, '\n'}
	ok[written](t, s.cs, "file_write", map[string]any{"path": "blob.bin", "content": base64.StdEncoding.EncodeToString(bin), "encoding": "base64"})
	if r := ok[fileRead](t, s.cs, "file_read", map[string]any{"path": "blob.bin"}); !r.Binary || r.Base64 != base64.StdEncoding.EncodeToString(bin) {
		t.Errorf("binary read: %+v", r)
	}

	type listing struct {
		Entries []struct {
			Path string `json:"path"`
			Type string `json:"type"`
		} `json:"entries"`
	}
	l := ok[listing](t, s.cs, "file_list", map[string]any{"depth": 2})
	var paths []string
	for _, e := range l.Entries {
		paths = append(paths, e.Path+":"+e.Type)
	}
	if got := strings.Join(paths, " "); got != "blob.bin:file run.sh:file src:dir src/main.txt:file" {
		t.Errorf("file_list: %s", got)
	}

	ok[struct{}](t, s.cs, "file_delete", map[string]any{"path": "blob.bin"})
	if msg := failing(t, s.cs, "file_delete", map[string]any{"path": "src"}); msg == "" {
		t.Error("deleting a non-empty directory without recursive succeeded")
	}
	ok[struct{}](t, s.cs, "file_delete", map[string]any{"path": "src", "recursive": true})
	if _, err := os.Stat(filepath.Join(s.workdir, "src")); !os.IsNotExist(err) {
		t.Errorf("src after file_delete: %v", err)
	}
	if msg := failing(t, s.cs, "file_delete", map[string]any{"path": ".", "recursive": true}); !strings.Contains(msg, "itself") {
		t.Errorf("deleting the workspace: %q", msg)
	}
	if msg := failing(t, s.cs, "file_read", map[string]any{"path": "nope.txt"}); !strings.Contains(msg, "file_list") {
		t.Errorf("missing file: %q", msg)
	}
}

// The file tools reach the sandbox's whole filesystem as its commands see
// it (for the host provider, the host): an absolute path anywhere, a
// relative one leaving the workspace, a symlink out of it; file_read of
// /etc/os-release gives what exec cat gives. Writing to a symlink in the
// workspace still replaces the link, never follows it.
func TestFileToolsReachTheSandbox(t *testing.T) {
	s := startStdio(t)
	outside := filepath.Join(filepath.Dir(s.workdir), filepath.Base(s.workdir)+"-outside")
	if err := os.WriteFile(outside, []byte("theirs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(outside)
	cat := ok[execResult](t, s.cs, "exec", map[string]any{"command": "cat /etc/os-release"})
	if r := ok[fileRead](t, s.cs, "file_read", map[string]any{"path": "/etc/os-release"}); r.Content != cat.Stdout || r.Path != "/etc/os-release" {
		t.Errorf("file_read /etc/os-release: %+v, want what cat printed: %q", r, cat.Stdout)
	}
	ok[execResult](t, s.cs, "exec", map[string]any{"command": "ln -s " + outside + " filelink && ln -s / rootlink"})
	rel := "../" + filepath.Base(outside)
	for _, p := range []string{outside, rel, "filelink", "rootlink" + outside} {
		if r := ok[fileRead](t, s.cs, "file_read", map[string]any{"path": p}); r.Content != "theirs\n" {
			t.Errorf("file_read %s: %+v", p, r)
		}
	}
	ok[struct{}](t, s.cs, "file_edit", map[string]any{"path": outside, "old_string": "theirs", "new_string": "edited"})
	if b, _ := os.ReadFile(outside); string(b) != "edited\n" {
		t.Errorf("after file_edit: %q", b)
	}
	type written struct {
		Path    string `json:"path"`
		Size    int64  `json:"size"`
		Mode    string `json:"mode"`
		Created bool   `json:"created"`
	}
	made := outside + "-dir/sub/new.txt"
	defer os.RemoveAll(outside + "-dir")
	if w := ok[written](t, s.cs, "file_write", map[string]any{"path": made, "content": "new\n", "mode": "0600"}); !w.Created || w.Size != 4 || w.Mode != "0600" || w.Path != made {
		t.Errorf("file_write outside: %+v", w)
	}
	type listing struct {
		Path    string `json:"path"`
		Entries []struct {
			Path string `json:"path"`
			Type string `json:"type"`
			Size int64  `json:"size"`
		} `json:"entries"`
	}
	if l := ok[listing](t, s.cs, "file_list", map[string]any{"path": outside + "-dir", "depth": 2}); len(l.Entries) != 2 || l.Entries[1].Path != "sub/new.txt" || l.Entries[1].Size != 4 {
		t.Errorf("file_list outside: %+v", l)
	}
	if msg := failing(t, s.cs, "file_delete", map[string]any{"path": outside + "-dir"}); msg == "" {
		t.Error("deleting a non-empty directory without recursive succeeded")
	}
	ok[struct{}](t, s.cs, "file_delete", map[string]any{"path": outside + "-dir", "recursive": true})
	if _, err := os.Stat(outside + "-dir"); !os.IsNotExist(err) {
		t.Errorf("after file_delete: %v", err)
	}
	if msg := failing(t, s.cs, "file_read", map[string]any{"path": outside + "-missing"}); !strings.Contains(msg, "not found") && !strings.Contains(msg, "no such") {
		t.Errorf("a missing file outside: %q", msg)
	}
	// Writing to a symlink in the workspace replaces the link, never
	// follows it.
	if w := ok[written](t, s.cs, "file_write", map[string]any{"path": "filelink", "content": "mine\n"}); w.Mode != "0644" {
		t.Errorf("the file that replaced the link: mode %s", w.Mode)
	}
	if fi, err := os.Lstat(filepath.Join(s.workdir, "filelink")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("filelink after file_write: %v, %v", fi.Mode(), err)
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != "edited\n" {
		t.Errorf("the file outside: %q, %v", b, err)
	}
}

// Required parameters are required: file_write without content is an
// error and writes nothing.
func TestFileWriteNeedsContent(t *testing.T) {
	s := startStdio(t)
	res, err := s.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "file_write", Arguments: map[string]any{"path": "empty.txt"}})
	if err == nil && !res.IsError {
		t.Errorf("file_write without content succeeded: %s", mcptest.ResultText(res))
	}
	if _, err := os.Stat(filepath.Join(s.workdir, "empty.txt")); !os.IsNotExist(err) {
		t.Errorf("file_write without content made the file: %v", err)
	}
	ok[struct{}](t, s.cs, "file_write", map[string]any{"path": "empty.txt", "content": ""})
	if b, err := os.ReadFile(filepath.Join(s.workdir, "empty.txt")); err != nil || len(b) != 0 {
		t.Errorf("an empty content given: %q, %v", b, err)
	}
}
