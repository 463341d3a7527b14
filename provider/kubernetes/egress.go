package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/internal/egress"
	"github.com/runbox/runbox/internal/handover"
	"github.com/runbox/runbox/internal/homes"
)

// A private kubernetes sandbox (--network private) is a pod whose runboxd
// offers the egress proxy on the pod's loopback (runboxd serve --egress,
// with egress.Env in the workload's environment), and a host side on the
// machine that created it: `runbox-full egress-host kubernetes ID`,
// started detached by Create, which runs egress.Host over the sandbox's
// own authenticated channel (its own exec stream of `runboxd proxy --mux`
// through the API server: no shared kernel, so every byte travels in
// EgressService messages and no descriptor is ever accepted). It reads
// the policy in the sandbox's local record (<Home>/kubernetes/<id>/,
// 0700) for every connection and appends its refusals there.
//
// Lifecycle: it lives as long as the local record does. It looks every
// few seconds (egressGoneEvery) whether the record's secret is still
// there, and its exec stream's pod watch tells it at once when the pod is
// deleted or ends (the record is then removed too); either way it exits.
// A broken stream (the API server restarted, a network blip) is opened
// again. `runbox rm` removes the record, so the host side exits within
// egressGoneEvery. It does not survive a reboot of this machine, and
// another machine has none: there the sandbox's connections wait, then
// are refused ("no host side").
//
// What else the pod can reach is the pod network's: kubernetes gives a pod
// a route out unless a NetworkPolicy denies it. The operator's default-deny
// egress NetworkPolicy, selecting LabelNetwork=private, makes the proxy
// the only way out.

// NetworkPrivate is the network mode of a sandbox that reaches only what
// its egress policy allows, through runboxd's proxy and the host side.
const NetworkPrivate = "private"

// LabelNetwork is on the pods of private sandboxes (value NetworkPrivate),
// for an operator's NetworkPolicy to select.
const LabelNetwork = "runbox.dev/network"

// Lifecycle of the host side.
const (
	// egressGoneEvery is how often the host side looks whether its
	// sandbox's local record is still on this machine.
	egressGoneEvery = 2 * time.Second
	// egressRetryMax caps the pause between attempts to reach runboxd
	// again after the stream broke.
	egressRetryMax = 2 * time.Second
	// egressLogFile is the host side's log in the local record.
	egressLogFile = "egress.log"
)

// Errors of private sandboxes. Compare with errors.Is.
var (
	// ErrNotPrivate means an egress policy was asked of a sandbox that is
	// not on the private network. It wraps runbox.ErrInvalidSpec.
	ErrNotPrivate = fmt.Errorf("%w: the sandbox is not on the private network (runbox up --network private)", runbox.ErrInvalidSpec)
	// ErrNoEgressHost means this machine has no local record of a private
	// sandbox: its policy and host side are on the machine that created
	// it. It wraps errors.ErrUnsupported.
	ErrNoEgressHost = fmt.Errorf("%w: the sandbox's egress policy and host side are on the machine that created it", errors.ErrUnsupported)
)

// checkEgress refuses an allowlist without --network private, a policy
// that does not parse, and a private sandbox this provider could not keep
// a host side for.
func (p *Provider) checkEgress(spec runbox.SandboxSpec) error {
	if !spec.Egress.Empty() && spec.Network != NetworkPrivate {
		// Silently reaching nothing, or everything, would both betray an
		// allowlist.
		return fmt.Errorf("%w: an egress allowlist (--allow, --allow-cidr, --deny, --resolve) needs --network private, not %q", runbox.ErrInvalidSpec, spec.Network)
	}
	if err := egress.Policy(spec.Egress).Check(); err != nil {
		return fmt.Errorf("%w: %w", runbox.ErrInvalidSpec, err)
	}
	if spec.Network == NetworkPrivate && (p.Home == "" || p.Config != nil) {
		return fmt.Errorf("network private needs a runbox home and a kubeconfig (the host side keeps the sandbox's local record and reaches the pod itself): %w", errors.ErrUnsupported)
	}
	if spec.Network == NetworkPrivate {
		if _, err := homes.Open(p.Home); err != nil {
			return fmt.Errorf("network private keeps the sandbox's local record in the runbox home: %w", err)
		}
	}
	return nil
}

// startEgress writes a private sandbox's policy in its local record and
// starts its host side, detached.
func (p *Provider) startEgress(id string, pol runbox.EgressPolicy) error {
	dir := p.recordDir(id)
	if _, err := os.Stat(filepath.Join(dir, "secret")); err != nil {
		return fmt.Errorf("network private: the sandbox's local record: %w", err)
	}
	if err := egress.WritePolicy(filepath.Join(dir, egress.PolicyFile), egress.Policy(pol)); err != nil {
		return fmt.Errorf("network private: %w", err)
	}
	bin := p.EgressHost
	if bin == "" {
		var err error
		if bin, err = handover.Full.Find(); err != nil {
			return fmt.Errorf("network private: the host side: %w", err)
		}
	}
	log, err := os.OpenFile(filepath.Join(dir, egressLogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("network private: the host side's log: %w", err)
	}
	defer log.Close()
	cmd := exec.Command(bin, "egress-host", ProviderName, id)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "RUNBOX_HOME="+p.Home)
	if p.Kubeconfig != "" {
		cmd.Env = append(cmd.Env, "KUBECONFIG="+p.Kubeconfig)
	}
	// Its own session: a Ctrl-C aimed at the caller never reaches it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("network private: start the host side: %w", err)
	}
	// Reaped while this process lives (runbox serve), so an exited host
	// side is not left a zombie.
	go cmd.Wait()
	return nil
}

// ServeEgress is the host side of private sandbox id's egress (see the
// comment at the top of this file): it carries the connections the pod's
// runboxd offers, deciding each by the policy in the local record, until
// ctx ends or the sandbox is gone (its local record removed, its pod
// lost). It needs the local record; a nil log discards.
func (p *Provider) ServeEgress(ctx context.Context, id string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	_, secret, err := p.readRecord(id)
	if err != nil {
		return fmt.Errorf("egress host side: %w", err)
	}
	dial, gone, err := p.StreamDialer(id)
	if err != nil {
		return fmt.Errorf("egress host side: %w", err)
	}
	dir := p.recordDir(id)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		t := time.NewTicker(egressGoneEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if gone() {
					log.Info("egress: the sandbox is gone", "sandbox", id)
					cancel()
					return
				}
			}
		}
	}()
	refusals := egress.NewRefusalLog(filepath.Join(dir, egress.RefusalsFile), log)
	logDone := make(chan struct{})
	go func() { defer close(logDone); refusals.Run(ctx) }()
	defer func() { cancel(); <-logDone }()
	policyPath := filepath.Join(dir, egress.PolicyFile)
	h := &egress.Host{
		Dial:     daemonauth.Dialer(dial, secret),
		Policy:   func() (egress.Policy, error) { return egress.ReadPolicy(policyPath) },
		Log:      log,
		Refusals: refusals,
		// No shared kernel: bytes travel in messages (PassFDs false).
	}
	delay := 100 * time.Millisecond
	for ctx.Err() == nil && !gone() {
		err := h.Serve(ctx, func() {
			log.Info("egress: carrying the sandbox's connections", "sandbox", id)
			delay = 100 * time.Millisecond
		})
		if ctx.Err() != nil || gone() {
			break
		}
		if errors.Is(err, runbox.ErrUnauthenticated) {
			return fmt.Errorf("egress host side of %s: %w", id, err)
		}
		log.Warn("egress: reconnecting", "sandbox", id, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay = min(delay*2, egressRetryMax)
	}
	return nil
}

// policyPath is where the host side of sb's egress reads its policy.
func (p *Provider) policyPath(sb runbox.Sandbox) (string, error) {
	if sb.Detail["network"] != NetworkPrivate {
		return "", ErrNotPrivate
	}
	dir := p.recordDir(sb.ID)
	if dir == "" {
		return "", ErrNoEgressHost
	}
	path := filepath.Join(dir, egress.PolicyFile)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%w (%v)", ErrNoEgressHost, err)
	}
	return path, nil
}

// Egress returns the egress policy in force in sb, a private sandbox
// created on this machine.
func (p *Provider) Egress(_ context.Context, sb runbox.Sandbox) (runbox.EgressPolicy, error) {
	path, err := p.policyPath(sb)
	if err != nil {
		return runbox.EgressPolicy{}, err
	}
	pol, err := egress.ReadPolicy(path)
	return runbox.EgressPolicy(pol), err
}

// SetEgress replaces the egress policy of sb, a private sandbox created
// on this machine; the host side applies it to the next connection.
func (p *Provider) SetEgress(_ context.Context, sb runbox.Sandbox, pol runbox.EgressPolicy) error {
	if err := egress.Policy(pol).Check(); err != nil {
		return fmt.Errorf("%w: %w", runbox.ErrInvalidSpec, err)
	}
	path, err := p.policyPath(sb)
	if err != nil {
		return err
	}
	return egress.WritePolicy(path, egress.Policy(pol))
}

// TakeEgressRefusals returns the refusals the host side of sb's egress
// made since the last call and forgets them (egress.TakeRefusals), for
// runbox serve's audit log. A sandbox not on the private network, or
// created elsewhere, has none here.
func (p *Provider) TakeEgressRefusals(_ context.Context, sb runbox.Sandbox) ([]egress.Refused, error) {
	path, err := p.policyPath(sb)
	if err != nil {
		return nil, nil
	}
	return egress.TakeRefusals(filepath.Join(filepath.Dir(path), egress.RefusalsFile))
}
