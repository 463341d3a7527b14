package branching_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/branching"
	"github.com/runbox/runbox/provider/docker"
	"github.com/runbox/runbox/provider/host"
	"github.com/runbox/runbox/provider/kubernetes"
	"github.com/runbox/runbox/provider/local"
	"github.com/runbox/runbox/provider/ssh"
)

// TestSnapshotterOf: the providers that cannot snapshot (host, ssh,
// kubernetes) are refused with ErrUnsupported naming the provider, which
// is what the CLI, serve and MCP report; local and docker can.
func TestSnapshotterOf(t *testing.T) {
	for _, p := range []runbox.Provider{&host.Provider{}, &ssh.Provider{}, &kubernetes.Provider{}} {
		_, err := branching.SnapshotterOf(p)
		if !errors.Is(err, runbox.ErrUnsupported) || !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "provider "+p.Name()+" cannot snapshot") {
			t.Errorf("%s: %v, want ErrUnsupported naming the provider", p.Name(), err)
		}
	}
	for _, p := range []runbox.Provider{&local.Provider{}, &docker.Provider{}} {
		if _, err := branching.SnapshotterOf(p); err != nil {
			t.Errorf("%s: %v, want a Snapshotter", p.Name(), err)
		}
	}
}
