package seccomp

import "golang.org/x/sys/unix"

// privilegeProbesArch are the amd64-only calls that set a mode.
func privilegeProbesArch(p func(string) string) probeList {
	raw := func(nr uintptr, path string, a1, a2 uintptr) func() error {
		return func() error {
			r, _, e := unix.Syscall(nr, uintptr(unsafePath(path)), a1, a2)
			if e == 0 && (nr == unix.SYS_OPEN || nr == unix.SYS_CREAT) {
				unix.Close(int(r))
			}
			return errnoErr(e)
		}
	}
	return probeList{
		{"chmod(04755)", unix.EPERM, raw(unix.SYS_CHMOD, p("f"), 0o4755, 0)},
		{"chmod(0700)", nil, raw(unix.SYS_CHMOD, p("f"), 0o700, 0)},
		{"open(O_CREAT, 04755)", unix.EPERM, raw(unix.SYS_OPEN, p("h"), unix.O_CREAT|unix.O_WRONLY, 0o4755)},
		{"open(O_RDONLY, garbage 04755)", nil, raw(unix.SYS_OPEN, p("f"), unix.O_RDONLY, 0o4755)},
		{"creat(02755)", unix.EPERM, raw(unix.SYS_CREAT, p("i"), 0o2755, 0)},
		{"mknod(S_IFREG|02755)", unix.EPERM, raw(unix.SYS_MKNOD, p("j"), unix.S_IFREG|0o2755, 0)},
		{"mkdir(04755)", unix.EPERM, raw(unix.SYS_MKDIR, p("k"), 0o4755, 0)},
	}
}
