package procbox

import (
	"golang.org/x/sys/unix"
)

// physicalWd is the working directory as the kernel has it, with no
// symbolic link in it (os.Getwd trusts $PWD, which may have some).
func physicalWd() (string, error) { return unix.Getwd() }
