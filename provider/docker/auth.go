package docker

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"sync"

	moby "github.com/moby/moby/client"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/daemonauth"
)

// A docker sandbox's secret lives in a label of its container (LabelSecret),
// and runboxd in the container is given only its SHA-256.
//
// Why a label and not a file under the runbox home: docker sandboxes are
// found through their labels, by separate processes and possibly from
// another machine through a remote engine, so the engine is the one store
// every client of a sandbox shares. Reading a label takes access to the
// engine, which already lets its holder `docker exec` anything in the
// container as root: the label gives away nothing that access does not.
// From inside the container, labels are out of reach (unless the engine's
// socket is mounted in, which hands over the engine anyway).

// dialerFor returns the dialer of container c, authenticated with the
// secret in its labels.
func (p *Provider) dialerFor(c ctr) runbox.Dialer {
	return p.withSecret(p.dialer(c.ID, c.Labels[LabelSocket]), c.ID, c.Labels[LabelSecret])
}

// withSecret returns dial with every connection authenticated by the
// sandbox's secret: secretHex, or when it is "" the label of containerID
// (a container id, or "runbox-sandbox:ID"), read from the engine at the
// first dial and kept.
func (p *Provider) withSecret(dial runbox.Dialer, containerID, secretHex string) runbox.Dialer {
	var mu sync.Mutex
	return func(ctx context.Context) (net.Conn, error) {
		mu.Lock()
		if secretHex == "" {
			s, err := p.secretOf(ctx, containerID)
			if err != nil {
				mu.Unlock()
				return nil, err
			}
			secretHex = s
		}
		h := secretHex
		mu.Unlock()
		secret, err := hex.DecodeString(h)
		if err == nil {
			err = daemonauth.CheckSecret(secret)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: container %.12s: label %s: %v", runbox.ErrUnauthenticated, containerID, LabelSecret, err)
		}
		return daemonauth.Dialer(dial, secret)(ctx)
	}
}

// secretOf reads the secret label of containerID from the engine.
func (p *Provider) secretOf(ctx context.Context, containerID string) (string, error) {
	cli, err := p.engine()
	if err != nil {
		return "", err
	}
	var labels map[string]string
	if sbID, ok := strings.CutPrefix(containerID, "runbox-sandbox:"); ok {
		cs, err := containers(ctx, cli, sbID)
		if err != nil {
			return "", err
		}
		if len(cs) == 0 {
			return "", fmt.Errorf("no container for sandbox %s: %w", sbID, runbox.ErrSandboxNotFound)
		}
		labels = cs[0].Labels
	} else {
		ir, err := cli.ContainerInspect(ctx, containerID, moby.ContainerInspectOptions{})
		if err != nil {
			return "", p.lostCause(ctx, containerID, fmt.Errorf("inspect container %.12s: %w", containerID, err))
		}
		if ir.Container.Config != nil {
			labels = ir.Container.Config.Labels
		}
	}
	s := labels[LabelSecret]
	if s == "" {
		return "", fmt.Errorf("%w: container %.12s has no %s label (a sandbox made before runbox authenticated its connections): remove it and create it again",
			runbox.ErrUnauthenticated, containerID, LabelSecret)
	}
	return s, nil
}
