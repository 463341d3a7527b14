package ssh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// StreamDialer returns what the sandbox's persistent endpoint (package
// internal/endpoint) carries: dial opens a fresh channel to the runboxd
// socket of sandbox id (its exact id) on the provider's one SSH connection
// to the host, re-reading the record each time, without authenticating
// (the endpoint's caller presents the secret); gone reports whether the
// sandbox's record is gone from this machine.
func (p *Provider) StreamDialer(id string) (dial func(ctx context.Context) (net.Conn, error), gone func() bool, err error) {
	if !validID(id) {
		return nil, nil, fmt.Errorf("ssh sandbox id %q: not an id", id)
	}
	dir, err := p.recordsDir()
	if err != nil {
		return nil, nil, err
	}
	sbDir := filepath.Join(dir, id)
	dial = func(ctx context.Context) (net.Conn, error) {
		rec, err := readRecord(sbDir)
		if err != nil {
			return nil, fmt.Errorf("ssh sandbox %s: %w", id, err)
		}
		if rec.ID != id {
			return nil, fmt.Errorf("ssh sandbox record %s names sandbox %q", id, rec.ID)
		}
		l, err := p.linkFor(rec.Target)
		if err != nil {
			return nil, err
		}
		return l.dialSocket(ctx, rec)
	}
	gone = func() bool {
		_, err := os.Stat(filepath.Join(sbDir, secretFile))
		return errors.Is(err, os.ErrNotExist)
	}
	return dial, gone, nil
}
