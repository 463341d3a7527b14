package mcpserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/runbox/runbox"
)

// explain adds to a tool's error what the model can do about it. The
// result becomes a tool result with isError set, not a protocol error.
func explain(err error) error {
	hint := ""
	switch {
	case errors.Is(err, runbox.ErrSandboxLost):
		hint = "the sandbox is gone (its processes and files with it); call again without a sandbox argument to get a fresh default sandbox, or make one with sandbox_create"
	case errors.Is(err, runbox.ErrSandboxNotFound):
		hint = "sandbox_list shows the sandboxes; leave sandbox out to use this session's default"
	case errors.Is(err, runbox.ErrEscapesRoot):
		hint = "the path leaves the directory it is resolved in"
	case errors.Is(err, runbox.ErrFileNotFound):
		hint = "file_list shows what exists"
	case errors.Is(err, runbox.ErrExecNotFound):
		hint = "exec_list shows the sandbox's execs"
	case errors.Is(err, runbox.ErrProviderUnavailable):
		hint = "this provider cannot work on the server's machine now"
	case errors.Is(err, context.DeadlineExceeded):
		hint = "the call ran out of time"
	}
	if hint == "" {
		return err
	}
	return fmt.Errorf("%w (%s)", err, hint)
}
