package layerchmod

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox/internal/seccomp"
)

// call is a notified chmod-family call, decoded.
type call struct {
	name string
	// fd is fchmod's descriptor, or the directory descriptor of a path
	// form (AT_FDCWD for chmod).
	fd int
	// hasPath says the call names a path, at pathAddr in the caller.
	hasPath  bool
	pathAddr uint64
	// mode is what the kernel would apply (its umode_t: 16 bits).
	mode uint32
	// flags are fchmodat2's (AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH).
	flags int
}

// decode reads a notification as the kernel reads the call's arguments
// (an int descriptor, a 16-bit mode, fchmodat2's flags checked first). A
// call of another number is refused (EPERM): the filter sends none.
func decode(n seccomp.Notification) (call, unix.Errno) {
	a := n.Args
	switch n.Nr {
	case unix.SYS_FCHMOD:
		return call{name: "fchmod", fd: int(int32(a[0])), mode: uint32(uint16(a[1]))}, 0
	case unix.SYS_FCHMODAT:
		return call{name: "fchmodat", fd: int(int32(a[0])), hasPath: true, pathAddr: a[1], mode: uint32(uint16(a[2]))}, 0
	case unix.SYS_FCHMODAT2:
		flags := uint32(a[3])
		if flags&^uint32(unix.AT_SYMLINK_NOFOLLOW|unix.AT_EMPTY_PATH) != 0 {
			return call{}, unix.EINVAL
		}
		return call{name: "fchmodat2", fd: int(int32(a[0])), hasPath: true, pathAddr: a[1], mode: uint32(uint16(a[2])), flags: int(flags)}, 0
	}
	if c, ok := decodeArch(n); ok {
		return c, 0
	}
	return call{}, unix.EPERM
}

// emptyPath is "" for fchmodat2(AT_EMPTY_PATH).
var emptyPath = []byte{0}

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }
