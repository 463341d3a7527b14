package execrules

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/runbox/runbox"
)

// ExitTimedOut is the exit status of a command that runbox stopped for a
// timeout and that then exited by itself (GNU timeout's 124): a timeout is
// never a success.
const ExitTimedOut = 124

// ExitStatusFailure is the exit status when runbox itself failed rather
// than the command it ran (docker run's convention).
const ExitStatusFailure = 125

// ExitStatus is the status runbox exits with for res: the command's own,
// except after a timeout, when a command that exited by itself (it handled
// runbox's SIGTERM) gives 124; one killed by a signal gives 128+N.
func ExitStatus(res runbox.Result) int {
	if (res.TimedOut || res.IdleTimedOut) && res.Signal == "" {
		return ExitTimedOut
	}
	return res.ExitCode
}

// ExitNotFound and ExitNotExecutable are the exit statuses of an argv
// whose program does not exist or cannot be executed, as a shell has them.
const (
	ExitNotFound      = 127
	ExitNotExecutable = 126
)

// ReportFailure prints runbox's own failure err on w as one line,
// "runbox: <error>", and returns ExitStatusFailure; for a command that
// could not be started because its program is missing or not executable,
// ExitNotFound or ExitNotExecutable, as a shell does.
func ReportFailure(w io.Writer, err error) int {
	fmt.Fprintln(w, "runbox: "+OneLine(err.Error()))
	switch {
	case errors.Is(err, runbox.ErrCommandNotFound):
		return ExitNotFound
	case errors.Is(err, runbox.ErrCommandNotExecutable):
		return ExitNotExecutable
	}
	return ExitStatusFailure
}

// OneLine folds a multi-line message (a daemon log tail) onto one line.
func OneLine(s string) string {
	s = strings.TrimSpace(s)
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }), " | ")
}

// ReportStop says on w (stderr) why runbox stopped the command, if it did,
// and warns of survivors, a truncated spill and output the stream missed.
// timeout and idle are the flags given (0: not given).
func ReportStop(w io.Writer, res runbox.Result, timeout, idle time.Duration) {
	switch {
	case res.TimedOut && timeout > 0:
		fmt.Fprintf(w, "runbox: timed out after %v\n", timeout)
	case res.TimedOut:
		fmt.Fprintln(w, "runbox: timed out")
	case res.IdleTimedOut && idle > 0:
		fmt.Fprintf(w, "runbox: no output for %v: stopped\n", idle)
	case res.IdleTimedOut:
		fmt.Fprintln(w, "runbox: stopped after no output for the idle timeout")
	case res.Cancelled:
		fmt.Fprintln(w, "runbox: cancelled")
	case res.OOMKilled:
		fmt.Fprintln(w, "runbox: killed: out of memory (the sandbox's memory limit)")
	}
	if res.Survivors > 0 {
		fmt.Fprintf(w, "runbox: warning: %d processes survived SIGKILL\n", res.Survivors)
	}
	if res.SpillTruncated {
		fmt.Fprintln(w, "runbox: warning: a spill file holds only the start of its stream, or none of it (the sandbox's spill budget ran out, or a write failed)")
	}
	if res.StreamGaps > 0 {
		where := "the sandbox's replay ring no longer had it"
		if spills := spillPaths(res); spills != "" {
			where = "the sandbox's spill files have it: " + spills
		}
		fmt.Fprintf(w, "runbox: warning: %d bytes of output are missing above (%d gaps): %s\n",
			res.StreamLost, res.StreamGaps, where)
	}
}

// ReportGap marks on w (stderr), where it happens in the streamed output,
// a cut: output that left the daemon's replay ring before this stream read
// it.
func ReportGap(w io.Writer, g runbox.OutputGap) {
	if g.Bytes == 0 {
		// A gap met on an attach from a sequence number: runboxd knows
		// the chunks, not their bytes; the end of the output counts them.
		fmt.Fprintf(w, "\nrunbox: [... output left out here (chunks %d-%d left the replay ring); the end of the output counts it and names the spill file that has it ...]\n",
			g.FromSeq, g.ToSeq-1)
		return
	}
	fmt.Fprintf(w, "\nrunbox: [... %d bytes of output left out here (chunks %d-%d left the replay ring); the end of the output names the spill file that has them ...]\n",
		g.Bytes, g.FromSeq, g.ToSeq-1)
}

// ReportLeftovers says on w (stderr) that the command left processes
// running, and how to see and stop them.
func ReportLeftovers(w io.Writer, res runbox.Result, sandbox string) {
	if res.LeftRunning == 0 {
		return
	}
	fmt.Fprintf(w, "runbox: %d process(es) this command started still run in the background (runbox ps %s shows them; runbox cancel %s %s stops them)\n",
		res.LeftRunning, sandbox, sandbox, res.ID)
}

// spillPaths lists res's spill files, each with the stream offset it
// starts at when that is not 0 ("PATH (from byte N of stdout)").
func spillPaths(res runbox.Result) string {
	var parts []string
	for _, s := range []struct {
		path, stream string
		off          int64
	}{{res.StdoutSpill, "stdout", res.StdoutSpillOffset}, {res.StderrSpill, "stderr", res.StderrSpillOffset}} {
		switch {
		case s.path == "":
		case s.off > 0:
			parts = append(parts, fmt.Sprintf("%s (from byte %d of %s)", s.path, s.off, s.stream))
		default:
			parts = append(parts, s.path)
		}
	}
	return strings.Join(parts, ", ")
}
