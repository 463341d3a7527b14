// Package execrules holds the rules of `runbox exec` that both CLI binaries
// follow: its flags and their checks, the spec they make, the exit status
// of a result, the messages that report how it ended, and its --json
// object. The runbox front (internal/front) runs the common execs itself
// and package cli (runbox-full) runs every other, so each rule lives here
// once. It imports nothing heavy: no HTTP, protobuf or command-line
// framework.
package execrules

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/runbox/runbox"
)

// Flags are exec's flags (and run's and sh's, which share them).
type Flags struct {
	Timeout, Grace, Idle time.Duration
	// GraceSet says --grace was given (0 then means none, not the default).
	GraceSet            bool
	ID, Session, Cwd    string
	Env                 []string
	Interactive, TTY    bool
	Login, Detach, JSON bool
	// CancelOnExit: runboxd stops the exec if this process dies first.
	CancelOnExit bool
	// KillLeftovers: stop background processes when the command exits.
	KillLeftovers bool
	// Keep (sh --keep-on-exit) is the opposite of CancelOnExit.
	Keep bool
}

// NewFlags returns the flags' defaults.
func NewFlags() Flags { return Flags{Grace: runbox.DefaultGrace, CancelOnExit: true} }

// Kind is the type of a flag's value.
type Kind int

// The kinds of exec's flags.
const (
	Duration    Kind = iota // a Go duration (time.ParseDuration)
	String                  // a string
	StringArray             // a string, once per use of the flag
	Bool                    // true, or =false
)

// Def is one of exec's flags.
type Def struct {
	Name, Short string
	Kind        Kind
	Usage       string
	// RunToo says run has the flag as well as exec (run has no --detach).
	RunToo bool
	// Front says the runbox front handles the flag itself (anything else
	// it hands to runbox-full); for a Bool flag, only its true value.
	Front bool
}

// Defs are exec's flags, in the order --help lists them.
var Defs = []Def{
	{"timeout", "", Duration, "stop the command and everything it started after this long (0: no limit)", true, true},
	{"grace", "", Duration, "time between SIGTERM and SIGKILL when stopping (0: SIGKILL at once)", true, true},
	{"idle-timeout", "", Duration, "stop the command after this long without output (0: no limit)", true, true},
	{"id", "", String, "exec id (default: generated); an id that exists is attached to, not run again", true, true},
	{"session", "", String, "shell session to run in: its directory and exported environment carry over between execs", true, true},
	{"cwd", "", String, "working directory (default: the sandbox's)", true, true},
	{"env", "e", StringArray, "set an environment variable: K=V, or K to pass this process's value", true, true},
	{"interactive", "i", Bool, "stream this process's stdin to the command (default: stdin is /dev/null)", true, false},
	{"tty", "t", Bool, "run on a PTY sized like this terminal (all output arrives as stdout; with -i, a terminal stdin is put in raw mode)", true, false},
	{"login", "", Bool, "run the shell as a login shell", true, true},
	{"json", "", Bool, "print the result as one JSON object instead of streaming output", true, true},
	{"cancel-on-exit", "", Bool, "if this runbox process dies (any signal, even SIGKILL), runboxd stops the command; =false leaves it running (runbox attach follows it)", true, true},
	{"kill-leftovers", "", Bool, "when the command exits, stop what it left running in the background (by default it runs on: runbox ps shows it)", true, true},
	{"detach", "", Bool, "start the command, print its exec id and return", false, false},
}

// Target returns where the flag named name is stored in f: a
// *time.Duration, *string, *[]string or *bool as its Def's Kind says.
func (f *Flags) Target(name string) any {
	switch name {
	case "timeout":
		return &f.Timeout
	case "grace":
		return &f.Grace
	case "idle-timeout":
		return &f.Idle
	case "id":
		return &f.ID
	case "session":
		return &f.Session
	case "cwd":
		return &f.Cwd
	case "env":
		return &f.Env
	case "interactive":
		return &f.Interactive
	case "tty":
		return &f.TTY
	case "login":
		return &f.Login
	case "json":
		return &f.JSON
	case "cancel-on-exit":
		return &f.CancelOnExit
	case "kill-leftovers":
		return &f.KillLeftovers
	case "detach":
		return &f.Detach
	}
	panic("execrules: no flag " + name)
}

// Check refuses flags runbox cannot honour, and nonsense combinations.
func (f *Flags) Check() error {
	switch {
	case f.Timeout < 0 || f.Grace < 0 || f.Idle < 0:
		return fmt.Errorf("--timeout, --grace and --idle-timeout must not be negative: %w", runbox.ErrInvalidSpec)
	case f.Detach && (f.Interactive || f.JSON):
		return fmt.Errorf("--detach cannot be combined with -i or --json (use runbox attach): %w", runbox.ErrInvalidSpec)
	}
	for _, kv := range f.Env {
		if k, _, _ := strings.Cut(kv, "="); k == "" {
			return fmt.Errorf("-e %q: expected K=V or K: %w", kv, runbox.ErrInvalidSpec)
		}
	}
	return nil
}

// Spec makes the spec the flags ask for with command: one argument is a
// shell string, several an argv. It leaves out what the caller decides
// (the pty, CancelOnDisconnect, an id of its own when --id is not given).
func (f *Flags) Spec(command []string) runbox.ExecSpec {
	var spec runbox.ExecSpec
	if len(command) == 1 {
		spec.Command = command[0]
	} else {
		spec.Argv = command
	}
	spec.ID = f.ID
	if f.Timeout > 0 {
		spec.Timeout = f.Timeout
	}
	switch {
	case !f.GraceSet: // the daemon's default
	case f.Grace > 0:
		spec.Grace = f.Grace
	default:
		spec.Grace = runbox.NoGrace
	}
	spec.KillLeftovers = f.KillLeftovers
	if f.Idle > 0 {
		spec.IdleTimeout = f.Idle
	}
	spec.Cwd = f.Cwd
	spec.Session = f.Session
	for _, kv := range f.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			v, ok = os.LookupEnv(k)
			if !ok {
				continue // like docker: an unset K is not passed
			}
		}
		if spec.Env == nil {
			spec.Env = make(map[string]string)
		}
		spec.Env[k] = v
	}
	spec.Login = f.Login
	return spec
}

// NewExecID returns a fresh exec id.
func NewExecID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
