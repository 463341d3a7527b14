package layerchmod

import (
	"golang.org/x/sys/unix"

	"github.com/runbox/runbox/internal/seccomp"
)

// decodeArch decodes the amd64-only chmod(path, mode).
func decodeArch(n seccomp.Notification) (call, bool) {
	if n.Nr != unix.SYS_CHMOD {
		return call{}, false
	}
	return call{name: "chmod", fd: unix.AT_FDCWD, hasPath: true, pathAddr: n.Args[0], mode: uint32(uint16(n.Args[1]))}, true
}
