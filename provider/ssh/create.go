package ssh

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/internal/runboxdbin"
)

// Create starts a sandbox on the target host (Provider.Target, else
// $RUNBOX_SSH): it connects (checking the host key), installs runboxd in
// the remote user's cache unless that version is there, starts it detached
// under a state directory of its own, and returns once it answers. The
// sandbox's workdir is spec.Workdir on the remote host, created if absent,
// else the remote user's home. A host offers no images or limits through
// this provider; Create refuses specs that ask for them.
func (p *Provider) Create(ctx context.Context, spec runbox.SandboxSpec) (runbox.Sandbox, error) {
	fail := func(id string, err error) (runbox.Sandbox, error) {
		if id == "" {
			id = spec.Name
		}
		return runbox.Sandbox{}, &runbox.Error{Op: "create", Sandbox: id, Err: err}
	}
	if spec.FromSnapshot != "" {
		// Ignoring it would give a sandbox without the snapshot's files.
		return fail("", fmt.Errorf("from snapshot %s: provider %s cannot snapshot: %w", spec.FromSnapshot, ProviderName, runbox.ErrUnsupported))
	}
	target := p.Target
	if target == "" {
		target = os.Getenv(TargetEnv)
	}
	if target == "" {
		return fail("", fmt.Errorf("%w: %w", runbox.ErrInvalidSpec, ErrNoTarget))
	}
	if err := checkSpec(spec); err != nil {
		return fail("", err)
	}
	if spec.Name != "" && !validName(spec.Name) {
		return fail("", fmt.Errorf("invalid name %q: use letters, digits, '_', '.', '-' (at most 63, not starting with a punctuation mark): %w", spec.Name, runbox.ErrInvalidSpec))
	}
	binPath, err := runboxdbin.Locate(p.Runboxd)
	if err != nil {
		return fail("", err)
	}
	bin, err := readBinary(binPath)
	if err != nil {
		return fail("", err)
	}
	l, err := p.linkFor(target)
	if err != nil {
		return fail("", err)
	}
	// Connect (and check the host key) before anything is written here.
	if _, err := l.client(ctx); err != nil {
		return fail("", err)
	}
	dir, err := p.recordsDir()
	if err != nil {
		return fail("", err)
	}
	rec, sbDir, err := reserve(dir, record{Name: spec.Name, Created: time.Now().UTC(), Target: target, Endpoint: l.ep.String()})
	if err != nil {
		return fail("", err)
	}
	if err := p.start(ctx, l, bin, &rec, sbDir, spec); err != nil {
		if rec.RemoteDir != "" {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
			_, _ = l.run(cctx, "clean up", cleanupScript, nil, strconv.Itoa(rec.Pid), rec.StartTime, rec.ID, rec.RemoteDir)
			cancel()
		}
		os.RemoveAll(sbDir)
		return fail(rec.ID, err)
	}
	return p.toSandbox(rec, sbDir, true, ""), nil
}

// checkSpec refuses what a plain host cannot give a sandbox.
func checkSpec(spec runbox.SandboxSpec) error {
	var bad []string
	if spec.Image != "" {
		bad = append(bad, "an image")
	}
	if spec.Rootfs != "" {
		bad = append(bad, "a root filesystem")
	}
	if spec.HostRoot {
		bad = append(bad, "--host-root")
	}
	if spec.Memory != 0 || spec.Pids != 0 || spec.CPUs != 0 || spec.Disk != 0 {
		bad = append(bad, "resource limits")
	}
	if spec.Network != "" && spec.Network != "host" {
		bad = append(bad, "network "+strconv.Quote(spec.Network))
	}
	if len(bad) > 0 {
		return fmt.Errorf("the ssh provider runs commands on the host as the remote user, so it cannot provide %s: %w",
			strings.Join(bad, ", "), errors.ErrUnsupported)
	}
	return nil
}

// start installs and starts runboxd for rec and waits until it answers;
// it fills rec's remote facts and saves them.
func (p *Provider) start(ctx context.Context, l *link, bin *binary, rec *record, sbDir string, spec runbox.SandboxSpec) error {
	secret, err := readSecret(sbDir)
	if err != nil {
		return err
	}
	remoteBin, err := l.install(ctx, bin)
	if err != nil {
		return err
	}
	rec.Runboxd = remoteBin
	args := append([]string{rec.ID, remoteBin, daemonauth.Sum(secret), spec.Workdir}, spec.DaemonArgs...)
	out, err := l.run(ctx, "start runboxd", startScript, nil, args...)
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 5 {
		return fmt.Errorf("start runboxd: unexpected answer %q", out)
	}
	rec.RemoteDir, rec.StartTime, rec.Workdir, rec.BootID = lines[0], lines[2], lines[3], lines[4]
	if rec.Pid, err = strconv.Atoi(lines[1]); err != nil {
		return fmt.Errorf("start runboxd: bad pid %q", lines[1])
	}
	if len(rec.socket()) > maxSocketPath {
		return fmt.Errorf("runboxd's socket %s on the remote host would be longer than the %d bytes a unix socket allows", rec.socket(), maxSocketPath)
	}
	if err := writeRecord(sbDir, *rec); err != nil {
		return err
	}
	info, err := p.waitReady(ctx, l, *rec, sbDir)
	if err != nil {
		return err
	}
	if info.Pid != rec.Pid {
		return fmt.Errorf("start runboxd: it reports pid %d, the shell started %d", info.Pid, rec.Pid)
	}
	rec.Containment = info.CgroupMode
	return writeRecord(sbDir, *rec)
}

// waitReady polls until runboxd answers Info through the provider's
// dialer. When it does not, it looks whether runboxd still runs, and
// returns at once, with its log, when it does not.
func (p *Provider) waitReady(ctx context.Context, l *link, rec record, sbDir string) (runbox.DaemonInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	dial := p.Dialer(runbox.Sandbox{ID: rec.ID})
	var last error
	for i := 0; ; i++ {
		c := client.New(dial, client.WithSandboxName(rec.ID))
		pctx, pcancel := context.WithTimeout(ctx, aliveTimeout)
		info, err := c.Info(pctx)
		pcancel()
		c.Close()
		if err == nil {
			return info, nil
		}
		last = err
		if errors.Is(err, runbox.ErrUnauthenticated) {
			return runbox.DaemonInfo{}, err
		}
		// The dialer itself says when runboxd is gone; a starting one only
		// has no socket yet.
		if errors.Is(err, runbox.ErrSandboxLost) && strings.Contains(err.Error(), "is not running") {
			return runbox.DaemonInfo{}, fmt.Errorf("runboxd did not start: %w", err)
		}
		select {
		case <-ctx.Done():
			return runbox.DaemonInfo{}, fmt.Errorf("runboxd did not answer within %v: %w", startTimeout, last)
		case <-time.After(pollInterval):
		}
	}
}
