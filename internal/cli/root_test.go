package cli_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/buildinfo"
	"github.com/runbox/runbox/internal/cli"
)

func TestExitCode(t *testing.T) {
	var stderr bytes.Buffer
	if code := cli.ExitCode(nil, &stderr); code != 0 || stderr.Len() != 0 {
		t.Errorf("ExitCode(nil) = %d, %q", code, stderr.String())
	}
	if code := cli.ExitCode(&cli.ExitError{Code: 3}, &stderr); code != 3 || stderr.Len() != 0 {
		t.Errorf("ExitCode(exit 3) = %d, %q", code, stderr.String())
	}
	err := &runbox.Error{Op: "exec", Sandbox: "sb", Err: errors.New("line one\nline two")}
	if code := cli.ExitCode(err, &stderr); code != 125 || stderr.String() != "runbox: exec sandbox sb: line one | line two\n" {
		t.Errorf("ExitCode(runbox error) = %d, %q", code, stderr.String())
	}
}

func TestVersion(t *testing.T) {
	if o := rb(t, "version"); o.code != 0 || o.stdout != buildinfo.Current()+"\n" {
		t.Errorf("version: %+v", o)
	}
}

func TestUsageErrors(t *testing.T) {
	setHome(t)
	for _, args := range [][]string{
		{"exec"},
		{"exec", "sb"},
		{"exec", "--no-such-flag", "sb", "--", "true"},
		{"up", "--provider", "docker"},
		{"up", "--provider", "nosuch"},
		{"up", "--memory", "lots"},
		{"exec", "-t", "sb", "--", "true"},
		{"run", "--no-such-flag", "--", "true"}, // ("run sb -- true" runs the program sb, as docker run)
		{"rm"},
		{"nosuch"},
	} {
		o := rb(t, args...)
		if o.code != 125 || !bytes.HasPrefix([]byte(o.stderr), []byte("runbox: ")) || bytes.Count([]byte(o.stderr), []byte("\n")) != 1 {
			t.Errorf("runbox %q: %+v; want 125 and one line on stderr", args, o)
		}
	}
	if o := rb(t, "--help"); o.code != 0 || !contains(o.stdout, "exec", "run", "attach") {
		t.Errorf("--help: %+v", o)
	}
}
