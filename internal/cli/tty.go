package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// Default PTY size when no local terminal tells us one.
const (
	defaultRows = 24
	defaultCols = 80
)

// fdOf returns the file descriptor behind v when it is an open file.
func fdOf(v any) (int, bool) {
	f, ok := v.(*os.File)
	if !ok || f == nil {
		return 0, false
	}
	return int(f.Fd()), true
}

// isTerminal reports whether v is a file open on a terminal.
func isTerminal(v any) bool {
	fd, ok := fdOf(v)
	return ok && term.IsTerminal(fd)
}

// termSize is the size of the local terminal: stdout's, else stdin's, else
// 24×80.
func (a *app) termSize() (rows, cols uint16) {
	for _, v := range []any{a.stdout, a.stdin} {
		if fd, ok := fdOf(v); ok && term.IsTerminal(fd) {
			if w, h, err := term.GetSize(fd); err == nil && w > 0 && h > 0 {
				return uint16(min(h, 0xffff)), uint16(min(w, 0xffff))
			}
		}
	}
	return defaultRows, defaultCols
}

// execStarted starts the exec and drives it to its result: with
// interactive it feeds this process's stdin to the exec as it arrives (end
// of input closes the exec's stdin, or types ^D on a PTY); with tty the
// local terminal's size changes are forwarded, and when stdin is a terminal
// and interactive, it is in raw mode until the exec ends.
func (a *app) execStarted(ctx context.Context, cl *client.Client, spec runbox.ExecSpec, opts []client.ExecOption, interactive, tty bool) (runbox.Result, error) {
	if interactive && !tty {
		opts = append(opts, client.WithStdinStream())
	}
	if tty && interactive {
		if fd, ok := fdOf(a.stdin); ok && term.IsTerminal(fd) {
			old, err := term.MakeRaw(fd)
			if err != nil {
				return runbox.Result{}, err
			}
			defer term.Restore(fd, old)
		}
	}
	p, err := cl.StartSpec(ctx, spec, opts...)
	if err != nil {
		return runbox.Result{}, err
	}
	ended := make(chan struct{}) // closed when the exec's result is in
	defer close(ended)
	if tty {
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for {
				select {
				case <-winch:
					rows, cols := a.termSize()
					_ = p.Resize(ctx, rows, cols)
				case <-ended:
					return
				}
			}
		}()
	}
	if interactive {
		// The pump ends at end of input or when the exec stops taking
		// stdin. A read blocked on a terminal outlives the exec; the
		// process exits soon after anyway.
		go a.pumpStdin(ctx, p, tty && !isTerminal(a.stdin), ended)
	}
	return p.Wait(ctx)
}

// stdinEOFEvery is how often end of file is typed again into a pty whose
// input came from a file or pipe (see pumpStdin) at first; after
// stdinEOFFastRetypes the interval doubles up to stdinEOFMaxEvery.
const (
	stdinEOFFastRetypes = 8
	stdinEOFEvery       = 250 * time.Millisecond
	stdinEOFMaxEvery    = 5 * time.Second
)

// pumpStdin copies this process's stdin to the exec until end of input,
// then closes the exec's stdin. On a pty that types the end-of-file
// character, which a program switching the terminal's mode at that moment
// (a shell starting its line editor, which flushes pending input) never
// sees; so when stdin is not a terminal (retype), the end of file is typed
// again until the exec ends: often at first, then backing off, because a
// loaded machine may start the shell's line editor seconds late. Input that
// has ended reads as end of file however often it is read.
func (a *app) pumpStdin(ctx context.Context, p *client.Process, retype bool, ended <-chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, rerr := a.stdin.Read(buf)
		if n > 0 {
			if err := p.WriteStdin(ctx, buf[:n]); err != nil {
				return
			}
		}
		if rerr != nil {
			break
		}
	}
	if p.CloseStdin(ctx) != nil || !retype {
		return
	}
	every := stdinEOFEvery
	for n := 1; ; n++ {
		t := time.NewTimer(every)
		select {
		case <-t.C:
		case <-ended:
			t.Stop()
			return
		}
		if p.CloseStdin(ctx) != nil {
			return
		}
		if n >= stdinEOFFastRetypes {
			every = min(every*2, stdinEOFMaxEvery)
		}
	}
}

// widthOf returns a function reporting the width of the terminal v is open
// on, as it is when called (0 when unknown).
func widthOf(v any) func() int {
	return func() int {
		if fd, ok := fdOf(v); ok {
			if w, _, err := term.GetSize(fd); err == nil {
				return w
			}
		}
		return 0
	}
}
