package layerchmod

import (
	"errors"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// creds are the file-system credentials of one thread: what the kernel
// checks when it resolves a path and changes a mode.
type creds struct {
	fsuid, fsgid int
	groups       []int
	// eff, perm and inh are the capability sets (bit N: capability N).
	eff, perm, inh uint64
}

// All calls below act on the calling thread only (raw system calls, not
// the process-wide ones of package syscall): the server's thread is
// locked and never shared.

// threadCreds returns the calling thread's credentials.
func threadCreds() (creds, error) {
	var c creds
	c.fsuid = setfsuid(-1)
	c.fsgid = setfsgid(-1)
	g, err := unix.Getgroups()
	if err != nil {
		return c, fmt.Errorf("getgroups: %w", err)
	}
	c.groups = g
	c.eff, c.perm, c.inh, err = capget()
	return c, err
}

// setfsuid and setfsgid set the thread's fsuid (fsgid) and return the
// previous one; -1 changes nothing (the kernel reports no errors: check
// with a second call).
func setfsuid(id int) int {
	r, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, uintptr(uint32(id)), 0, 0)
	return int(uint32(r))
}

func setfsgid(id int) int {
	r, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, uintptr(uint32(id)), 0, 0)
	return int(uint32(r))
}

func capget() (eff, perm, inh uint64, err error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var d [2]unix.CapUserData
	if err := unix.Capget(&hdr, &d[0]); err != nil {
		return 0, 0, 0, fmt.Errorf("capget: %w", err)
	}
	join := func(lo, hi uint32) uint64 { return uint64(lo) | uint64(hi)<<32 }
	return join(d[0].Effective, d[1].Effective), join(d[0].Permitted, d[1].Permitted), join(d[0].Inheritable, d[1].Inheritable), nil
}

func capset(eff, perm, inh uint64) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	d := [2]unix.CapUserData{
		{Effective: uint32(eff), Permitted: uint32(perm), Inheritable: uint32(inh)},
		{Effective: uint32(eff >> 32), Permitted: uint32(perm >> 32), Inheritable: uint32(inh >> 32)},
	}
	if err := unix.Capset(&hdr, &d[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// errCreds is a switch of credentials that did not take.
var errCreds = errors.New("layerchmod: the thread's credentials did not change")

// become makes the calling thread act, on files, as a thread with the
// caller's credentials c; own are the thread's own (threadCreds). Its
// effective capabilities become the caller's (within its own permitted
// set); its permitted set stays, so restore can take them back.
func become(c, own creds) error {
	if !slices.Equal(c.groups, own.groups) {
		if err := unix.Setgroups(c.groups); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
	}
	setfsgid(c.fsgid)
	setfsuid(c.fsuid)
	if setfsgid(-1) != c.fsgid || setfsuid(-1) != c.fsuid {
		return errCreds
	}
	// After setfsuid the kernel has dropped or raised the file-system
	// capabilities on its own: set the effective set to the caller's.
	if err := capset(c.eff&own.perm, own.perm, own.inh); err != nil {
		return err
	}
	eff, _, _, err := capget()
	if err != nil {
		return err
	}
	if eff != c.eff&own.perm {
		return errCreds
	}
	return nil
}

// restore gives the calling thread back its own credentials, and checks
// they are back.
func restore(own creds) error {
	if err := capset(own.perm, own.perm, own.inh); err != nil {
		return err
	}
	setfsuid(own.fsuid)
	setfsgid(own.fsgid)
	if g, err := unix.Getgroups(); err != nil || !slices.Equal(g, own.groups) {
		if err := unix.Setgroups(own.groups); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
	}
	if err := capset(own.eff, own.perm, own.inh); err != nil {
		return err
	}
	now, err := threadCreds()
	if err != nil {
		return err
	}
	if now.fsuid != own.fsuid || now.fsgid != own.fsgid || !slices.Equal(now.groups, own.groups) ||
		now.eff != own.eff || now.perm != own.perm {
		return errCreds
	}
	return nil
}
