package jail

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// mountFuseRoot mounts the FUSE connection of the device the provider left
// in the layers at cfg.Merged, then sends the open device back on
// cfg.ReplyFD: the provider starts the server on it, and until then any
// access under cfg.Merged waits.
//
// The kernel wants a FUSE mount made in a user namespace to use a device
// opened in that same namespace, which is why the jail, not the provider,
// opens it. The mount is nosuid and nodev whatever the server says, and
// allow_other with default_permissions: the kernel checks every access
// against the modes and owners the server presents, and the server then
// reads the host's files with its own (an unprivileged stranger's)
// rights, so a root-only host file stays unreadable to sandbox root.
func mountFuseRoot(cfg Config) error {
	dev := filepath.Join(LayersPath, FuseDevice)
	fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("jail: open the FUSE device %s: %w", dev, err)
	}
	defer unix.Close(fd)
	if err := os.Remove(dev); err != nil {
		return fmt.Errorf("jail: remove the FUSE device node: %w", err)
	}
	if err := os.MkdirAll(cfg.Merged, 0o755); err != nil {
		return fmt.Errorf("jail: %s: %w", cfg.Merged, err)
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other,default_permissions", fd)
	if err := unix.Mount("runbox-root", cfg.Merged, "fuse", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("jail: mount the FUSE root at %s: %w", cfg.Merged, err)
	}
	if cfg.ReplyFD <= 0 {
		return fmt.Errorf("jail: no socket to send the FUSE device back on")
	}
	if err := unix.Sendmsg(cfg.ReplyFD, []byte("fuse"), unix.UnixRights(fd), nil, 0); err != nil {
		return fmt.Errorf("jail: send the FUSE device to the provider: %w", err)
	}
	return nil
}
