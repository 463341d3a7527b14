//go:build !linux

package main

import (
	"context"
	"errors"
)

var errSnapshotLinux = errors.New("the snapshot section runs on Linux (the local provider, du of the snapshot's files)")

func (b *branchEnv) benchPause(context.Context) (*LatencyReport, error) { return nil, errSnapshotLinux }

func (b *branchEnv) snapshotDisk(string) (int64, error) { return 0, errSnapshotLinux }

func (b *branchEnv) sandboxDisk(string) (int64, error) { return 0, errSnapshotLinux }

func (b *branchEnv) baseBytes() int64 { return 0 }

func rootUsed() int64 { return 0 }
