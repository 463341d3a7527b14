//go:build !linux

package docker

import (
	"errors"
	"fmt"
)

func startEgressHost(runboxd, stateDir, socket string, pid int) (int, error) {
	return 0, fmt.Errorf("network private: the egress host side runs on Linux only: %w", errors.ErrUnsupported)
}
