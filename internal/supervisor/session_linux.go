package supervisor

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/runbox/runbox"
)

// stateFD is the descriptor on which a session exec's shell writes its final
// working directory, exported environment and (bash) functions and aliases
// when it exits. It is a side channel: stdout and stderr carry only what the
// command wrote. A high number leaves 3-9 free for the command's own use.
const stateFD = 63

// maxStateBytes bounds a session state record.
const maxStateBytes = 8 << 20

// Session state records are framed so the daemon knows when one is complete
// even if a background child keeps the descriptor open:
// "RBSTATE1\0" cwd "\0" (env entry "\0")* "\0" functions-and-aliases "\0RBEND\0".
const (
	stateHeader  = "RBSTATE1\x00"
	stateTrailer = "\x00RBEND\x00"
)

// sessionEnvSkip are variables the shell or runboxd manages; they are not
// carried from one exec of a session to the next.
var sessionEnvSkip = map[string]bool{
	execMarkerVar: true, daemonMarkerVar: true, "PWD": true, "OLDPWD": true, "SHLVL": true, "_": true,
}

// session is one named shell session.
type session struct {
	name string

	mu        sync.Mutex
	cwd       string
	env       map[string]string // nil until the first exec saves it
	funcsFile string            // bash functions and aliases, sourced at start
	execs     int
}

// sessionSnapshot is the session state an exec starts from.
type sessionSnapshot struct {
	s            *session
	cwd          string
	fallbackFrom string
	env          map[string]string
	funcsFile    string
}

func (s *Supervisor) session(name string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.sessions[name]
	if !ok {
		ss = &session{name: name, cwd: s.cfg.Dir}
		s.sessions[name] = ss
	}
	return ss
}

// Sessions describes every session, by name.
func (s *Supervisor) Sessions() []runbox.SessionInfo {
	s.mu.Lock()
	list := make([]*session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		list = append(list, ss)
	}
	s.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].name < list[j].name })
	infos := make([]runbox.SessionInfo, len(list))
	for i, ss := range list {
		ss.mu.Lock()
		infos[i] = runbox.SessionInfo{Name: ss.name, Cwd: ss.cwd, EnvVars: len(ss.env), Execs: ss.execs}
		ss.mu.Unlock()
	}
	return infos
}

// DeleteSession forgets a session; execs running in it finish without
// saving. It returns ErrSessionNotFound for an unknown name.
func (s *Supervisor) DeleteSession(name string) error {
	s.mu.Lock()
	ss, ok := s.sessions[name]
	delete(s.sessions, name)
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("delete session %s: %w", name, runbox.ErrSessionNotFound)
	}
	ss.mu.Lock()
	if ss.funcsFile != "" {
		os.Remove(ss.funcsFile)
	}
	ss.mu.Unlock()
	return nil
}

// snapshot returns the state an exec starts from, falling back to the
// nearest existing parent when the saved directory is gone.
func (ss *session) snapshot() sessionSnapshot {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.execs++
	snap := sessionSnapshot{s: ss, cwd: ss.cwd, env: ss.env, funcsFile: ss.funcsFile}
	if st, err := os.Stat(snap.cwd); err != nil || !st.IsDir() {
		snap.fallbackFrom = snap.cwd
		dir := snap.cwd
		for {
			parent := filepath.Dir(dir)
			if st, err := os.Stat(parent); err == nil && st.IsDir() {
				snap.cwd = parent
				break
			}
			if parent == dir {
				snap.cwd = "/"
				break
			}
			dir = parent
		}
	}
	return snap
}

// sessionPrelude wraps command so that, however it exits (but for a signal),
// the shell reports its state on stateFD. Under bash, the session's
// functions and aliases are loaded first.
func sessionPrelude(command, funcsFile string, bash bool) string {
	var b strings.Builder
	b.WriteString("__runbox_save() {\n")
	b.WriteString("  __runbox_status=$?\n")
	fmt.Fprintf(&b, "  { printf 'RBSTATE1\\000%%s\\000' \"$PWD\"; env -0; printf '\\000'; ")
	if bash {
		b.WriteString("declare -f; alias -p; ")
	}
	fmt.Fprintf(&b, "printf '\\000RBEND\\000'; } >&%d 2>/dev/null\n", stateFD)
	b.WriteString("  exit $__runbox_status\n}\n")
	b.WriteString("trap __runbox_save EXIT\n")
	if bash {
		b.WriteString("shopt -s expand_aliases\n")
		if funcsFile != "" {
			fmt.Fprintf(&b, ". %s\n", shellQuote(funcsFile))
		}
	}
	b.WriteString(command)
	b.WriteString("\n")
	return b.String()
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// parsedState is a session state record.
type parsedState struct {
	cwd   string
	env   map[string]string
	funcs string
}

var errIncompleteState = errors.New("incomplete session state record")

func parseState(rec []byte) (parsedState, error) {
	if !bytes.HasPrefix(rec, []byte(stateHeader)) || !bytes.HasSuffix(rec, []byte(stateTrailer)) {
		return parsedState{}, errIncompleteState
	}
	body := rec[len(stateHeader) : len(rec)-len(stateTrailer)]
	cwd, rest, ok := bytes.Cut(body, []byte{0})
	if !ok {
		return parsedState{}, errIncompleteState
	}
	st := parsedState{cwd: string(cwd), env: make(map[string]string)}
	for {
		entry, more, ok := bytes.Cut(rest, []byte{0})
		if !ok {
			return parsedState{}, errIncompleteState
		}
		rest = more
		if len(entry) == 0 {
			break
		}
		if k, v, ok := strings.Cut(string(entry), "="); ok && !sessionEnvSkip[k] {
			st.env[k] = v
		}
	}
	st.funcs = string(rest)
	return st, nil
}

// save records a finished exec's state in the session, unless the session
// was deleted meanwhile.
func (s *Supervisor) saveSession(ss *session, st parsedState) error {
	s.mu.Lock()
	current := s.sessions[ss.name] == ss
	s.mu.Unlock()
	if !current {
		return nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if st.cwd != "" {
		ss.cwd = st.cwd
	}
	ss.env = st.env
	if strings.TrimSpace(st.funcs) == "" {
		return nil
	}
	if ss.funcsFile == "" {
		dir := filepath.Join(s.stateDir, "sessions")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("save session %s: %w", ss.name, err)
		}
		f, err := os.CreateTemp(dir, "funcs-*.sh")
		if err != nil {
			return fmt.Errorf("save session %s: %w", ss.name, err)
		}
		f.Close()
		ss.funcsFile = f.Name()
	}
	if err := os.WriteFile(ss.funcsFile, []byte(st.funcs), 0o600); err != nil {
		return fmt.Errorf("save session %s: %w", ss.name, err)
	}
	return nil
}
