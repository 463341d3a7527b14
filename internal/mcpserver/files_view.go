package mcpserver

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// A path outside the workspace (or a symlink in it that leads out) is
// reached the way a command reaches it: by a small shell script run as an
// exec, with the command's credentials, in the command's view of the
// sandbox. So the file tools reach exactly what exec reaches, no more:
// never runboxd's own files, which its file API could see.

// viewReadBytes bounds what a read outside the workspace fetches.
const viewReadBytes = 4 << 20

// Exit statuses of the view scripts, for errors in plain words.
const (
	viewNotFound = 102
	viewIsDir    = 103
	viewNotDir   = 104
)

// viewExec runs script with the path (and args) as $1...; stdin is given
// to it. It returns stdout, or an error in plain words.
func (s *Server) viewExec(ctx context.Context, st *session, t fileTarget, op, script string, stdin []byte, head int, args ...string) ([]byte, int64, error) {
	opts := []client.ExecOption{client.WithTimeout(s.cfg.CallTimeout), client.WithSpill(runbox.SpillNever),
		client.WithOutputLimits(head, 0)}
	if stdin != nil {
		opts = append(opts, client.WithStdin(stdin))
	}
	argv := append([]string{"sh", "-c", script, "sh", t.abs()}, args...)
	r, err := t.ref.cl.ExecArgv(ctx, argv, opts...)
	if err != nil {
		return nil, 0, st.lost(t.ref, fmt.Errorf("%s %s: %w", op, t.abs(), err))
	}
	msg := strings.TrimSpace(string(r.Stderr))
	switch {
	case r.ExitCode == viewNotFound:
		return nil, 0, fmt.Errorf("%s %s: %w", op, t.abs(), runbox.ErrFileNotFound)
	case r.ExitCode == viewIsDir:
		return nil, 0, fmt.Errorf("%s %s: %w", op, t.abs(), runbox.ErrIsDirectory)
	case r.ExitCode == viewNotDir:
		return nil, 0, fmt.Errorf("%s %s: %w", op, t.abs(), runbox.ErrNotDirectory)
	case !r.OK():
		if msg == "" {
			msg = fmt.Sprintf("exit %d", r.ExitCode)
		}
		return nil, 0, fmt.Errorf("%s %s: %s", op, t.abs(), msg)
	}
	out := r.Stdout
	if r.StdoutDropped > 0 {
		out = out[:min(head, len(out))]
	}
	return out, r.StdoutBytes, nil
}

// viewRead returns the file's size and its first viewReadBytes bytes.
func (s *Server) viewRead(ctx context.Context, st *session, t fileTarget) (data []byte, size int64, err error) {
	const script = `f=$1
[ -e "$f" ] || exit 102
[ -d "$f" ] && exit 103
exec cat -- "$f"`
	data, size, err = s.viewExec(ctx, st, t, "read", script, nil, viewReadBytes)
	return data, size, err
}

// viewWrite writes data to the file (its parents made), with perm when
// given (else an existing file's mode stays); it returns the file's size,
// mode and whether it was made.
func (s *Server) viewWrite(ctx context.Context, st *session, t fileTarget, data []byte, perm string) (runbox.FileInfo, bool, error) {
	const script = `f=$1
[ -d "$f" ] && exit 103
new=0; [ -e "$f" ] || new=1
mkdir -p -- "$(dirname -- "$f")" || exit 1
cat > "$f" || exit 1
if [ -n "$2" ]; then chmod "$2" "$f" || exit 1; fi
printf '%s ' "$new"; stat -L -c '%s %a' -- "$f"`
	out, _, err := s.viewExec(ctx, st, t, "write", script, data, 4<<10, perm)
	if err != nil {
		return runbox.FileInfo{}, false, err
	}
	f := strings.Fields(string(out))
	if len(f) != 3 {
		return runbox.FileInfo{}, false, fmt.Errorf("write %s: unexpected answer %q", t.abs(), out)
	}
	size, _ := strconv.ParseInt(f[1], 10, 64)
	mode, _ := strconv.ParseUint(f[2], 8, 32)
	return runbox.FileInfo{Size: size, Mode: modeFromOctal(uint32(mode))}, f[0] == "1", nil
}

// viewDelete deletes the file, an empty directory, or a directory with
// its contents when recursive.
func (s *Server) viewDelete(ctx context.Context, st *session, t fileTarget, recursive bool) error {
	const script = `f=$1
[ -e "$f" ] || [ -L "$f" ] || exit 102
if [ -d "$f" ] && [ ! -L "$f" ]; then
  if [ "$2" = 1 ]; then exec rm -rf -- "$f"; else exec rmdir -- "$f"; fi
fi
exec rm -f -- "$f"`
	r := "0"
	if recursive {
		r = "1"
	}
	_, _, err := s.viewExec(ctx, st, t, "delete", script, nil, 4<<10, r)
	return err
}

// viewList lists a directory depth levels deep (GNU find).
func (s *Server) viewList(ctx context.Context, st *session, t fileTarget, depth int) ([]FileEntry, bool, error) {
	const script = `f=$1
[ -e "$f" ] || exit 102
[ -d "$f" ] || exit 104
find "$f" -mindepth 1 -maxdepth "$2" -printf '%y\t%s\t%m\t%TY-%Tm-%TdT%TH:%TM:%TSZ\t%P\t%l\n' 2>/dev/null | head -n ` + "2001"
	out, _, err := s.viewExec(ctx, st, t, "list", script, nil, 1<<20, strconv.Itoa(depth))
	if err != nil {
		return nil, false, err
	}
	var entries []FileEntry
	for _, line := range bytes.Split(bytes.TrimSuffix(out, []byte("\n")), []byte("\n")) {
		f := strings.Split(string(line), "\t")
		if len(f) != 6 {
			continue
		}
		size, _ := strconv.ParseInt(f[1], 10, 64)
		mode, _ := strconv.ParseUint(f[2], 8, 32)
		typ := map[string]string{"f": "file", "d": "dir", "l": "symlink"}[f[0]]
		if typ == "" {
			typ = "other"
		}
		mtime := f[3]
		if i := strings.IndexByte(mtime, '.'); i >= 0 {
			mtime = mtime[:i] + "Z"
		}
		entries = append(entries, FileEntry{Path: f[4], Type: typ, Size: size, Mode: fmt.Sprintf("%04o", mode), ModTime: mtime, Target: f[5]})
	}
	if len(entries) > maxListEntries {
		return entries[:maxListEntries], true, nil
	}
	return entries, false, nil
}
