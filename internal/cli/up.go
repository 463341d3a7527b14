package cli

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/provider/docker"
	"github.com/runbox/runbox/provider/kubernetes"
	"github.com/runbox/runbox/provider/local"
	"github.com/runbox/runbox/provider/ssh"
)

func (a *app) upCmd() *cobra.Command {
	var f upFlags
	c := &cobra.Command{
		Use:   "up [flags]",
		Short: "Create a sandbox and print its id",
		Long: `Create a sandbox and print its id on one line.

The sandbox lives until "runbox rm". Refer to it by id, by a unique id prefix,
or by the --name alias, which must be unique across every provider.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, _ []string) error {
			p, spec, err := a.upSpec(&f)
			if err != nil {
				return fail("create", f.name, "", err)
			}
			sb, err := a.create(c.Context(), p, spec)
			if err != nil {
				return fail("create", f.name, "", err)
			}
			fmt.Fprintln(a.stdout, sb.ID)
			return nil
		},
	}
	f.add(c.Flags(), a.env.Provider)
	return c
}

// create makes the sandbox spec asks for with p, its name (if any) claimed
// in the name index first and unique across every provider, and recorded
// in the index once the sandbox is made.
func (a *app) create(ctx context.Context, p runbox.Provider, spec runbox.SandboxSpec) (runbox.Sandbox, error) {
	if _, remote := p.(*remoteProvider); remote {
		if err := a.checkNameFree(ctx, spec.Name); err != nil {
			return runbox.Sandbox{}, err
		}
		return p.Create(ctx, spec)
	}
	release, err := a.claimName(ctx, spec.Name)
	if err != nil {
		return runbox.Sandbox{}, err
	}
	if err := a.checkNameFree(ctx, spec.Name); err != nil {
		release()
		return runbox.Sandbox{}, err
	}
	sb, err := p.Create(ctx, spec)
	if err != nil {
		release()
		return sb, err
	}
	a.recordName(p, sb)
	return sb, nil
}

// upFlags are the flags up and run share.
type upFlags struct {
	provider, image, name, workdir string
	rootfs                         string
	from                           string // --from SNAPSHOT
	userns, hostRoot, mkdir        bool
	memory, network, disk          string
	egress                         egressFlags // network.go
	pids                           int64
	cpus                           float64
	ssh                            sshFlags
	server                         serverOptions // remote.go
	kube                           kubeFlags
	flags                          *pflag.FlagSet // to tell --pids 0 from no --pids
}

func (f *upFlags) add(fs *pflag.FlagSet, def string) {
	fs.StringVar(&f.provider, "provider", def, "where the sandbox runs ($RUNBOX_PROVIDER sets the default): "+strings.Join(providerNames(), ", "))
	fs.StringVar(&f.image, "image", "", "root filesystem image (providers that use images)")
	fs.StringVar(&f.rootfs, "rootfs", "", "local: a root filesystem directory to use instead of the host's root")
	fs.BoolVar(&f.userns, "userns", false, "local: (always on now; kept for old scripts)")
	_ = fs.MarkHidden("userns")
	fs.BoolVar(&f.hostRoot, "host-root", false, "local, as root: make the sandbox's root the host's root instead of an unprivileged host uid range (weaker: see docs/security.md)")
	fs.StringVar(&f.name, "name", "", "a unique name to refer to the sandbox by")
	fs.StringVar(&f.workdir, "workdir", "", "the sandbox's workspace (default: the current directory; local: mounted at /workspace; an existing directory, no symbolic link in its path; docker: none)")
	fs.BoolVar(&f.mkdir, "mkdir", false, "local and host: create the --workdir directory (as mkdir -p -m 0755 would, as you) when it does not exist; without it a missing workdir is an error")
	f.flags = fs
	fs.StringVar(&f.memory, "memory", "", "memory limit, e.g. 512M or 2G (local's default: min(4G, half the RAM); 0 or unlimited: none)")
	fs.StringVar(&f.disk, "disk", "", "what the sandbox may write to disk outside its workspace, e.g. 2G (local as root's default: min(10G, half the home's free space); 0 or unlimited: none; docker: engines whose storage driver can; kubernetes: ephemeral storage)")
	fs.Int64Var(&f.pids, "pids", 0, "process count limit (local's default: 4096; 0: none)")
	fs.Float64Var(&f.cpus, "cpus", 0, "CPU limit, e.g. 1.5 (local's default: none, but a CPU weight equal to the host's other groups)")
	f.ssh.add(fs)
	f.server.add(fs)
	f.kube.add(fs)
	fs.StringVar(&f.from, "from", "", "a snapshot (runbox snapshot) to start from: its filesystem under the sandbox's own writable layer, and, without --workdir, a copy of its workspace (local and docker)")
	fs.StringVar(&f.network, "network", "", "network: none (loopback only), private (local, docker: loopback only; kubernetes: the pod's network, which a NetworkPolicy should close; plus an egress proxy that reaches what --allow allows), or host (the host's interfaces and ports, reachable both ways), or a named docker network (default: local and host: host; docker: none)")
	f.egress.add(fs)
}

// upSpec returns the provider and sandbox spec the flags ask for.
func (a *app) upSpec(f *upFlags) (runbox.Provider, runbox.SandboxSpec, error) {
	p, err := a.provider(f.ssh.provider(f.provider))
	if err != nil {
		if a.remote.host == "" && f.provider == os.Getenv("RUNBOX_PROVIDER") {
			err = fmt.Errorf("$RUNBOX_PROVIDER: %w (set it to one of them, or unset it for %s)", err, defaultProvider)
		}
		return nil, runbox.SandboxSpec{}, err
	}
	if err := a.configure(p, f); err != nil {
		return nil, runbox.SandboxSpec{}, err
	}
	if err := f.server.apply(p); err != nil {
		return nil, runbox.SandboxSpec{}, err
	}
	memory := f.memory
	if strings.EqualFold(memory, "unlimited") {
		memory = "0"
	}
	mem, err := parseBytes(memory)
	if err != nil {
		return nil, runbox.SandboxSpec{}, fmt.Errorf("--memory: %w", err)
	}
	disk := f.disk
	if strings.EqualFold(disk, "unlimited") {
		disk = "0"
	}
	diskBytes, err := parseBytes(disk)
	if err != nil {
		return nil, runbox.SandboxSpec{}, fmt.Errorf("--disk: %w", err)
	}
	if f.pids < 0 || f.cpus < 0 {
		return nil, runbox.SandboxSpec{}, fmt.Errorf("--pids and --cpus must not be negative")
	}
	pids := f.pids
	if _, remote := p.(*remoteProvider); !remote && p.Name() == local.ProviderName {
		// The local provider has default limits; an explicit 0 is none.
		if memory != "" && mem == 0 {
			mem = local.Unlimited
		}
		if disk != "" && diskBytes == 0 {
			diskBytes = local.Unlimited
		}
		if f.flags != nil && f.flags.Changed("pids") && pids == 0 {
			pids = local.Unlimited
		}
	}
	if f.hostRoot && p.Name() != "local" {
		return nil, runbox.SandboxSpec{}, fmt.Errorf("--host-root is for the local provider, not %s", p.Name())
	}
	switch f.network {
	case "", "none", "host", "private":
	default:
		if f.provider != docker.ProviderName { // docker also takes a named network
			return nil, runbox.SandboxSpec{}, fmt.Errorf("--network %q: expected none, private or host", f.network)
		}
	}
	eg, err := f.egress.policy()
	if err != nil {
		return nil, runbox.SandboxSpec{}, err
	}
	if !eg.Empty() && f.network != "private" {
		return nil, runbox.SandboxSpec{}, fmt.Errorf("--allow, --allow-cidr, --deny and --resolve need --network private")
	}
	if f.from != "" {
		if _, err := snapshotterOf(p); err != nil {
			return nil, runbox.SandboxSpec{}, fmt.Errorf("--from: %w", err)
		}
	}
	if f.mkdir {
		if err := makeWorkdir(p, f.workdir, a.env.Home); err != nil {
			return nil, runbox.SandboxSpec{}, err
		}
	}
	return p, runbox.SandboxSpec{
		Name:         f.name,
		Image:        f.image,
		Rootfs:       f.rootfs,
		UserNS:       f.userns,
		HostRoot:     f.hostRoot,
		Workdir:      f.workdir,
		Memory:       mem,
		Pids:         pids,
		CPUs:         f.cpus,
		Disk:         diskBytes,
		Network:      f.network,
		Egress:       eg,
		FromSnapshot: f.from,
	}, nil
}

// configure gives p, a provider of this machine, the provider-specific
// flags set (ssh's, kubernetes'); they are an error with any other provider
// and through a server.
func (a *app) configure(p runbox.Provider, f *upFlags) error {
	_, remote := p.(*remoteProvider)
	mine := func(provider string) bool { return !remote && p.Name() == provider }
	switch {
	case f.ssh.set() && !mine(ssh.ProviderName):
		return fmt.Errorf("--ssh and --ssh-accept-new are for the ssh provider, not %s", p.Name())
	case f.kube.set() && !mine(kubernetes.ProviderName):
		return fmt.Errorf("--namespace, --pod-template, --context and --runboxd-image are for the kubernetes provider, not %s", p.Name())
	case !f.ssh.set() && !f.kube.set():
		return nil
	}
	switch p := p.(type) {
	case *ssh.Provider:
		p.Target, p.AcceptNew = f.ssh.target, f.ssh.acceptNew
	case *kubernetes.Provider:
		f.kube.apply(p)
	default:
		return fmt.Errorf("the %s provider takes no provider flags", p.Name())
	}
	return nil
}

// parseBytes parses a size such as 512M, 2g, 1.5G or 1048576 (binary units,
// like docker's --memory). "" is zero.
func parseBytes(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	num := strings.TrimRight(strings.ToUpper(s), "IB")
	mult := int64(1)
	if n := len(num); n > 0 {
		switch num[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult != 1 {
			num = num[:n-1]
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("invalid size %q (want e.g. 512M, 2G)", s)
	}
	return int64(v * float64(mult)), nil
}
