//go:build !linux

package fdsweep

// CloseInherited does nothing off Linux (runboxd runs only on Linux).
func CloseInherited(keep int) error { return nil }

// CloexecFrom does nothing off Linux.
func CloexecFrom(first int) error { return nil }
