package front

import "github.com/runbox/runbox/internal/handover"

// ExecFull replaces this process with runbox-full, run with args (the
// invocation's arguments without the program name); see
// handover.Binary.Exec. It returns only when runbox-full cannot be found
// or started.
func ExecFull(args []string, why string) error { return handover.Full.Exec(args, why) }

// FindFull returns runbox-full's path: $RUNBOX_FULL, else runbox-full
// beside the running executable, else on PATH.
func FindFull() (string, error) { return handover.Full.Find() }
