//go:build !linux

package docker

import "context"

// fileLock is a held flock: Linux only, elsewhere no lock.
type fileLock struct{}

func lockFile(context.Context, string, string, bool) (*fileLock, error) { return nil, nil }
func (*fileLock) unlock()                                               {}
