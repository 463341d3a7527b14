//go:build !linux

package docker

import (
	"context"
	"errors"
)

// cgroupFreezer is a container's cgroup freezer: Linux only.
type cgroupFreezer struct{ dir string }

var errNoFreezer = errors.New("no cgroup freezer here")

func findFreezer(int, string) (cgroupFreezer, error)          { return cgroupFreezer{}, errNoFreezer }
func (cgroupFreezer) freeze(context.Context) error            { return errNoFreezer }
func (cgroupFreezer) thaw() error                             { return errNoFreezer }
func (cgroupFreezer) frozen() (bool, error)                   { return false, errNoFreezer }
func (cgroupFreezer) writable() bool                          { return false }
func (cgroupFreezer) marker() string                          { return "" }
func parseFreezerMarker(string, string) (cgroupFreezer, bool) { return cgroupFreezer{}, false }
