// Package fdsweep keeps descriptors a process inherited by accident from
// crossing exec (security rule 3: nothing crosses exec). A descriptor that
// exists when a process starts survived its parent's exec, so it was not
// close-on-exec; Go's os/exec and syscall.ForkExec hand every such
// descriptor on to every child. runboxd closes the ones it was not given;
// the CLIs that start runboxd or other helpers mark them close-on-exec.
//
// It does not touch descriptors the process opens itself: Go opens every
// descriptor close-on-exec.
package fdsweep
