package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/runbox/runbox/internal/runboxdbin"
	"github.com/runbox/runbox/internal/sandboxkey"
	"io/fs"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	moby "github.com/moby/moby/client"

	"github.com/runbox/runbox"
	rbclient "github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/provider/host"
)

// ProviderName is the name the CLI and Sandbox.Provider use for this provider.
const ProviderName = "docker"

// StreamEnv names the environment variable that, set to "exec", makes every
// Provider reach runboxd through `docker exec runboxd proxy` even when the
// engine is local (for a unix-socket DOCKER_HOST whose engine does not share
// this machine's filesystem).
const StreamEnv = "RUNBOX_DOCKER_STREAM"

// Labels on runbox's containers.
const (
	LabelSandbox = "runbox.sandbox"
	LabelName    = "runbox.name"
	LabelSpec    = "runbox.spec"
	LabelCreated = "runbox.created"
	LabelStream  = "runbox.stream"
	LabelSocket  = "runbox.socket"
	// LabelSecret holds the sandbox's secret (hex), which every connection
	// to its runboxd starts with; runboxd is given only its hash. See
	// auth.go for why a label.
	LabelSecret = "runbox.secret"
)

// Stream kinds, the values of LabelStream.
const (
	streamSocket = "socket"
	streamExec   = "exec"
)

// Paths inside the container.
const (
	ctrRunboxd   = "/.runbox/runboxd"
	ctrRunDir    = "/.runbox/run"
	ctrSocket    = ctrRunDir + "/runboxd.sock"
	ctrWorkspace = "/workspace"
	// defaultNetwork keeps a sandbox off every network unless asked.
	defaultNetwork = "none"
)

// proxyCmd is the command of the exec stream.
var proxyCmd = []string{ctrRunboxd, "proxy", "--socket", ctrSocket}

// Timing knobs. None decides a command's fate: runboxd enforces exec
// deadlines itself; these bound how long the provider waits on the engine
// and on runboxd.
const (
	// startTimeout bounds how long Create waits for a started container's
	// runboxd to answer.
	startTimeout = 30 * time.Second
	// aliveTimeout bounds the Info probe that decides Sandbox.Alive; on the
	// exec stream it includes a docker exec round trip.
	aliveTimeout = 3 * time.Second
	// shutdownTimeout bounds the Shutdown RPC when the caller's context has
	// no deadline: it takes as long as the slowest exec's grace period.
	shutdownTimeout = 2 * time.Minute
	// exitTimeout is how long Remove waits for the container to stop after
	// the Shutdown RPC before it kills it.
	exitTimeout = 10 * time.Second
	// pollInterval is how often Create looks for runboxd.
	pollInterval = 20 * time.Millisecond
	// logTailLines is how much of the container's log an error quotes.
	logTailLines = "40"
)

// maxSocketPath is the longest unix socket path Linux accepts: sun_path is
// 108 bytes including the terminating NUL.
const maxSocketPath = 107

// Errors specific to the docker provider. Compare with errors.Is.
var (
	// ErrImageRequired means a spec named no image.
	ErrImageRequired = errors.New("a docker sandbox needs an image")
	// ErrNotStatic means the runboxd binary is dynamically linked.
	ErrNotStatic = runboxdbin.ErrNotStatic
)

// Provider creates sandboxes that are Docker containers with runboxd as
// PID 1. The zero value is ready to use; call Close when done with it.
type Provider struct {
	// Home is the runbox home directory, where socket-stream sandboxes keep
	// their bind-mounted run directory; "" means $RUNBOX_HOME, else
	// ~/.runbox. Unix socket paths are limited to 107 bytes.
	Home string
	// Runboxd is the path of a static runboxd binary; "" means
	// $RUNBOX_RUNBOXD, else a runboxd beside the running executable, else
	// runboxd in PATH.
	Runboxd string
	// ForceExecStream reaches runboxd through `docker exec runboxd proxy`
	// even when the engine is local (as RUNBOX_DOCKER_STREAM=exec does).
	ForceExecStream bool
	// Engine is the Docker client to use; nil means one made from the
	// environment (DOCKER_HOST, DOCKER_API_VERSION, DOCKER_CERT_PATH, ...)
	// on first use, closed by Close.
	Engine *moby.Client

	mu  sync.Mutex
	own *moby.Client
}

var _ runbox.Provider = (*Provider)(nil)

// Name returns "docker".
func (p *Provider) Name() string { return ProviderName }

// Close closes the engine client the provider made for itself, if any.
// Sandboxes live on.
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.own == nil {
		return nil
	}
	err := p.own.Close()
	p.own = nil
	return err
}

// engine returns the Docker client.
func (p *Provider) engine() (*moby.Client, error) {
	if p.Engine != nil {
		return p.Engine, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.own == nil {
		c, err := moby.New(moby.FromEnv)
		if err != nil {
			return nil, fmt.Errorf("docker client: %w", err)
		}
		p.own = c
	}
	return p.own, nil
}

// execForced reports whether every stream must be a docker exec.
func (p *Provider) execForced() bool {
	return p.ForceExecStream || os.Getenv(StreamEnv) == streamExec
}

func (p *Provider) home() (string, error) {
	h := p.Home
	if h == "" {
		var err error
		if h, err = host.DefaultHome(); err != nil {
			return "", err
		}
	}
	abs, err := filepath.Abs(h)
	if err != nil {
		return "", fmt.Errorf("runbox home %s: %w", h, err)
	}
	return abs, nil
}

// validName is what a sandbox name may look like (docker's container name
// rule), so names are safe in paths, container names and messages.
var validName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)

// validID is what a sandbox id looks like.
var validID = regexp.MustCompile(`^[0-9a-f]{12}$`)

// specLabel is the spec as recorded in LabelSpec.
type specLabel struct {
	Name       string   `json:"name,omitempty"`
	Image      string   `json:"image"`
	Workdir    string   `json:"workdir,omitempty"`
	Memory     int64    `json:"memory,omitempty"`
	Pids       int64    `json:"pids,omitempty"`
	CPUs       float64  `json:"cpus,omitempty"`
	Network    string   `json:"network"`
	DaemonArgs []string `json:"daemon_args,omitempty"`
}

// Create makes a container from spec.Image (pulling it when the engine does
// not have it), copies runboxd in, starts it, and returns once runboxd
// answers. On failure nothing is left behind.
func (p *Provider) Create(ctx context.Context, spec runbox.SandboxSpec) (runbox.Sandbox, error) {
	fail := func(id string, err error) (runbox.Sandbox, error) {
		if id == "" {
			id = spec.Name
		}
		return runbox.Sandbox{}, &runbox.Error{Op: "create", Sandbox: id, Err: err}
	}
	if err := checkSpec(spec); err != nil {
		return fail("", err)
	}
	binPath, err := runboxdbin.Locate(p.Runboxd)
	if err != nil {
		return fail("", err)
	}
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return fail("", fmt.Errorf("read runboxd: %w", err))
	}
	if err := runboxdbin.CheckStatic(bin, binPath); err != nil {
		return fail("", err)
	}
	workdir := ""
	if spec.Workdir != "" {
		if workdir, err = filepath.Abs(spec.Workdir); err != nil {
			return fail("", fmt.Errorf("workdir: %w", err))
		}
		if fi, err := os.Stat(workdir); err != nil {
			return fail("", fmt.Errorf("workdir: %w", err))
		} else if !fi.IsDir() {
			return fail("", fmt.Errorf("workdir %s is not a directory", workdir))
		}
	}
	cli, err := p.engine()
	if err != nil {
		return fail("", err)
	}
	if err := ensureImage(ctx, cli, spec.Image); err != nil {
		return fail("", err)
	}
	id, err := newID()
	if err != nil {
		return fail("", err)
	}

	network := spec.Network
	if network == "" {
		network = defaultNetwork
	}
	created := time.Now().UTC()
	specJSON, err := json.Marshal(specLabel{
		Name: spec.Name, Image: spec.Image, Workdir: workdir, Memory: spec.Memory, Pids: spec.Pids,
		CPUs: spec.CPUs, Network: network, DaemonArgs: spec.DaemonArgs,
	})
	if err != nil {
		return fail(id, fmt.Errorf("spec label: %w", err))
	}
	labels := map[string]string{
		LabelSandbox: id,
		LabelName:    spec.Name,
		LabelSpec:    string(specJSON),
		LabelCreated: created.Format(time.RFC3339Nano),
		LabelStream:  streamExec,
	}
	secret, err := daemonauth.NewSecret()
	if err != nil {
		return fail(id, err)
	}
	labels[LabelSecret] = hex.EncodeToString(secret)

	var mounts []mount.Mount
	stateDir, socket := "", ""
	if !p.execForced() && isLocal(cli) {
		home, err := p.home()
		if err != nil {
			return fail(id, err)
		}
		stateDir = filepath.Join(home, "docker", id)
		runDir := filepath.Join(stateDir, "run")
		socket = filepath.Join(runDir, "runboxd.sock")
		if len(socket) > maxSocketPath {
			return fail(id, fmt.Errorf("socket path %s would be %d bytes, more than the %d a unix socket allows: use a shorter RUNBOX_HOME (now %s), or %s=exec",
				socket, len(socket), maxSocketPath, home, StreamEnv))
		}
		if err := os.MkdirAll(stateDir, 0o700); err != nil {
			return fail(id, fmt.Errorf("state dir: %w", err))
		}
		// The run directory is writable by any uid, so runboxd can make its
		// socket whatever user the image runs as; its parent (0700) keeps
		// other host users out.
		if err := os.Mkdir(runDir, 0o700); err != nil {
			os.RemoveAll(stateDir)
			return fail(id, fmt.Errorf("state dir: %w", err))
		}
		if err := os.Chmod(runDir, 0o1777); err != nil {
			os.RemoveAll(stateDir)
			return fail(id, fmt.Errorf("state dir: %w", err))
		}
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: runDir, Target: ctrRunDir})
		labels[LabelStream] = streamSocket
		labels[LabelSocket] = socket
	}
	if workdir != "" {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: workdir, Target: ctrWorkspace})
	}

	entrypoint := []string{ctrRunboxd, "serve", "--socket", ctrSocket, "--auth-sha256", daemonauth.Sum(secret)}
	if spec.Pids > 0 {
		entrypoint = append(entrypoint, "--threads", strconv.Itoa(runboxdbin.SharedLimitThreads))
	}
	if stateDir != "" {
		// The socket is on the host, made by the container's user (root,
		// usually): open to every user, with the state directory (0700,
		// the creating user's) keeping out all but that user.
		entrypoint = append(entrypoint, "--socket-mode", "0666")
	}
	noInit := false
	view, err := viewFor(ctx, cli, spec.Image)
	if err != nil {
		if stateDir != "" {
			os.RemoveAll(stateDir)
		}
		return fail(id, err)
	}
	entrypoint = append(entrypoint, view.args...)
	labels[LabelView] = view.label
	hc := &container.HostConfig{
		// CAP_SYS_ADMIN for runboxd to build its commands' view, which
		// they never hold (see viewFor).
		CapAdd:      view.capAdd,
		SecurityOpt: view.securityOpt,
		NetworkMode: container.NetworkMode(network),
		// runboxd must be PID 1 itself: it is the sandbox's reaper, and its
		// exit must end the container.
		Init:   &noInit,
		Mounts: mounts,
		Resources: container.Resources{
			Memory:   spec.Memory,
			NanoCPUs: int64(math.Round(spec.CPUs * 1e9)),
		},
	}
	if spec.Pids > 0 {
		// The container's limit counts runboxd's threads too: the commands
		// get their Pids beside the threads runboxd keeps, and a few more.
		pids := spec.Pids + runboxdbin.SharedLimitAllowance
		hc.Resources.PidsLimit = &pids
	}
	cfg := &container.Config{
		Image:      spec.Image,
		Entrypoint: append(entrypoint, spec.DaemonArgs...),
		Cmd:        []string{},
		Labels:     labels,
		// runboxd as PID 1 stops every exec with the stop protocol on
		// SIGRTMIN+3 (not SIGTERM, which its commands could send it with
		// `kill 1`), whatever STOPSIGNAL the image asks for.
		StopSignal: "SIGRTMIN+3",
	}
	if workdir != "" {
		cfg.WorkingDir = ctrWorkspace
	}

	name := "runbox-" + id
	if spec.Name != "" {
		name = "runbox-" + spec.Name
	}
	cr, err := cli.ContainerCreate(ctx, moby.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: hc})
	if err != nil {
		if stateDir != "" {
			os.RemoveAll(stateDir)
		}
		if cerrdefs.IsConflict(err) && spec.Name != "" {
			return fail(id, fmt.Errorf("container %s exists: %w: %w", name, host.ErrNameInUse, err))
		}
		return fail(id, fmt.Errorf("create container from %s: %w", spec.Image, err))
	}
	cleanup := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), exitTimeout)
		defer cancel()
		cli.ContainerRemove(ctx, cr.ID, moby.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if stateDir != "" {
			os.RemoveAll(stateDir)
		}
	}

	archive, err := runboxdTar(bin)
	if err != nil {
		cleanup()
		return fail(id, err)
	}
	if _, err := cli.CopyToContainer(ctx, cr.ID, moby.CopyToContainerOptions{DestinationPath: "/", Content: archive}); err != nil {
		cleanup()
		return fail(id, fmt.Errorf("copy runboxd into container %.12s: %w", cr.ID, err))
	}
	if _, err := cli.ContainerStart(ctx, cr.ID, moby.ContainerStartOptions{}); err != nil {
		cleanup()
		return fail(id, fmt.Errorf("start container %.12s: %w", cr.ID, err))
	}
	c := ctr{ID: cr.ID, Name: name, Image: spec.Image, State: container.StateRunning, Labels: labels}
	if err := p.waitReady(ctx, cli, c); err != nil {
		cleanup()
		return fail(id, err)
	}
	if stateDir != "" {
		if err := c.save(stateDir); err != nil {
			cleanup()
			return fail(id, err)
		}
	}
	return p.toSandbox(c, true), nil
}

// listening reports whether a unix socket accepts a connection.
func listening(ctx context.Context, socket string) bool {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// containerFile, in a socket-stream sandbox's state directory, describes
// its container as the engine did at creation, so a process on this
// machine (a `runbox exec`) reaches the sandbox without asking the engine.
const containerFile = "container.json"

// save writes c to dir's containerFile.
func (c ctr) save(dir string) error {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("record container: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, containerFile), b, 0o600); err != nil {
		return fmt.Errorf("record container: %w", err)
	}
	return nil
}

// getHere finds a sandbox this machine's engine runs, by exact id or exact
// name, from the records in the runbox home, and returns it if something
// listens on its socket: the socket is in the sandbox's own state
// directory, where only its runboxd listens, and nothing listens once the
// container has stopped. The engine is not asked, so a `runbox exec` costs a
// process start and the exec. Anything less (no record, a prefix, a socket
// nothing listens on) is left to the engine.
func (p *Provider) getHere(ctx context.Context, key string) (runbox.Sandbox, bool) {
	if p.execForced() {
		return runbox.Sandbox{}, false
	}
	home, err := p.home()
	if err != nil {
		return runbox.Sandbox{}, false
	}
	dirs, _ := os.ReadDir(filepath.Join(home, "docker"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(home, "docker", d.Name(), containerFile))
		if err != nil {
			continue
		}
		var c ctr
		if json.Unmarshal(b, &c) != nil || c.Labels[LabelSandbox] != d.Name() {
			continue
		}
		if key != c.Labels[LabelSandbox] && key != c.Labels[LabelName] {
			continue
		}
		if c.stateDir() == "" || !listening(ctx, c.Labels[LabelSocket]) {
			return runbox.Sandbox{}, false
		}
		c.State = container.StateRunning
		return p.toSandbox(c, true), true
	}
	return runbox.Sandbox{}, false
}

// checkSpec refuses what a docker sandbox cannot be made from.
func checkSpec(spec runbox.SandboxSpec) error {
	if spec.Image == "" {
		return fmt.Errorf("%w: name one (e.g. --image debian:bookworm)", ErrImageRequired)
	}
	if spec.Name != "" && !validName.MatchString(spec.Name) {
		return fmt.Errorf("invalid name %q: use letters, digits, '_', '.', '-' (at most 63, not starting with a punctuation mark)", spec.Name)
	}
	if spec.Memory < 0 || spec.Pids < 0 || spec.CPUs < 0 || math.IsNaN(spec.CPUs) || math.IsInf(spec.CPUs, 0) {
		return fmt.Errorf("negative or invalid resource limit (memory %d, pids %d, cpus %v)", spec.Memory, spec.Pids, spec.CPUs)
	}
	return nil
}

// ensureImage makes sure the engine has image, pulling it when it does not.
func ensureImage(ctx context.Context, cli *moby.Client, image string) error {
	_, err := cli.ImageInspect(ctx, image)
	if err == nil {
		return nil
	}
	if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect image %s: %w", image, engineError(cli, err))
	}
	resp, err := cli.ImagePull(ctx, image, moby.ImagePullOptions{})
	if err != nil {
		return fmt.Errorf("image %s is not on the engine and cannot be pulled: %w", image, err)
	}
	defer resp.Close()
	if err := resp.Wait(ctx); err != nil {
		return fmt.Errorf("image %s is not on the engine and cannot be pulled: %w", image, err)
	}
	return nil
}

// engineError marks a failure to reach the engine at all as
// runbox.ErrProviderUnavailable, saying where it was looked for.
func engineError(cli *moby.Client, err error) error {
	if !moby.IsErrConnectionFailed(err) {
		return err
	}
	return fmt.Errorf("%w: no docker engine answers at %s (start dockerd, or point DOCKER_HOST at one): %w",
		runbox.ErrProviderUnavailable, cli.DaemonHost(), err)
}

// isLocal reports whether the engine listens on a unix socket, which is
// taken to mean it shares this machine's filesystem.
func isLocal(cli *moby.Client) bool {
	return strings.HasPrefix(cli.DaemonHost(), "unix://")
}

// newID returns 12 random hex digits.
func newID() (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("sandbox id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// runboxdTar is the archive copied to / before start: /.runbox/runboxd and
// the run directory (world-writable with the sticky bit, for images whose
// user is not root; on the socket stream a bind mount covers it).
func runboxdTar(bin []byte) (*bytes.Buffer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	hdrs := []*tar.Header{
		{Name: ".runbox/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now},
		{Name: ".runbox/run/", Typeflag: tar.TypeDir, Mode: 0o1777, ModTime: now},
		{Name: ".runbox/runboxd", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin)), ModTime: now},
	}
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("runboxd archive: %w", err)
		}
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, fmt.Errorf("runboxd archive: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("runboxd archive: %w", err)
	}
	return &buf, nil
}

// waitReady polls until the container's runboxd answers Info, the container
// stops (the error then quotes its log), or startTimeout passes.
func (p *Provider) waitReady(ctx context.Context, cli *moby.Client, c ctr) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	dial := p.dialerFor(c)
	socket := c.Labels[LabelSocket]
	var last error
	for {
		// On the socket stream, dial first: it is cheap, and the client
		// would otherwise retry a socket that is not there yet.
		ready := true
		if socket != "" && !p.execForced() {
			if conn, err := net.Dial("unix", socket); err == nil {
				conn.Close()
			} else {
				ready, last = false, err
			}
		}
		if ready {
			if last = probe(ctx, dial, c.Labels[LabelSandbox]); last == nil {
				return nil
			}
		}
		ir, err := cli.ContainerInspect(ctx, c.ID, moby.ContainerInspectOptions{})
		if err == nil && ir.Container.State != nil && !ir.Container.State.Running {
			st := ir.Container.State
			return fmt.Errorf("container %.12s stopped (status %s, exit code %d%s) before runboxd answered%s",
				c.ID, st.Status, st.ExitCode, errSuffix(st.Error), logTail(cli, c.ID))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("runboxd in container %.12s did not answer within %v (%v): %w%s",
				c.ID, startTimeout, last, ctx.Err(), logTail(cli, c.ID))
		case <-time.After(pollInterval):
		}
	}
}

func errSuffix(s string) string {
	if s == "" {
		return ""
	}
	return ", " + s
}

// logTail returns the last lines of the container's log (runboxd's stderr),
// formatted to follow an error message, or "".
func logTail(cli *moby.Client, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rc, err := cli.ContainerLogs(ctx, id, moby.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: logTailLines})
	if err != nil {
		return ""
	}
	defer rc.Close()
	var out bytes.Buffer
	stdcopy.StdCopy(&out, &out, rc)
	s := strings.TrimSpace(out.String())
	if s == "" {
		return ""
	}
	return "; container log: " + s
}

// probe asks runboxd for Info through dial, bounded by aliveTimeout.
func probe(ctx context.Context, dial runbox.Dialer, name string) error {
	ctx, cancel := context.WithTimeout(ctx, aliveTimeout)
	defer cancel()
	c := rbclient.New(dial, rbclient.WithSandboxName(name))
	defer c.Close()
	_, err := c.Info(ctx)
	return err
}

// ctr is what the provider needs to know of a container.
type ctr struct {
	ID, Name, Image string
	State           container.ContainerState
	Labels          map[string]string
}

func fromSummary(s container.Summary) ctr {
	name := ""
	if len(s.Names) > 0 {
		name = strings.TrimPrefix(s.Names[0], "/")
	}
	return ctr{ID: s.ID, Name: name, Image: s.Image, State: s.State, Labels: s.Labels}
}

// created returns when the sandbox was created, from its label.
func (c ctr) created() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, c.Labels[LabelCreated])
	return t
}

// stateDir returns the host directory a socket-stream sandbox keeps its run
// directory in, derived from its socket label and checked to have the
// $HOME/docker/<id>/run/runboxd.sock shape (so a foreign label never points
// Remove at another directory), or "".
func (c ctr) stateDir() string {
	sock := c.Labels[LabelSocket]
	if sock == "" || !filepath.IsAbs(sock) {
		return ""
	}
	dir := filepath.Dir(filepath.Dir(sock))
	if filepath.Base(sock) != "runboxd.sock" || filepath.Base(filepath.Dir(sock)) != "run" ||
		filepath.Base(dir) != c.Labels[LabelSandbox] || filepath.Base(filepath.Dir(dir)) != "docker" {
		return ""
	}
	return dir
}

// toSandbox describes c.
func (p *Provider) toSandbox(c ctr, alive bool) runbox.Sandbox {
	detail := map[string]string{
		"container":      c.ID,
		"container_name": c.Name,
		"image":          c.Image,
		"state":          string(c.State),
		"stream":         c.Labels[LabelStream],
	}
	if s := c.Labels[LabelSocket]; s != "" {
		detail["socket"] = s
	}
	if v := c.Labels[LabelView]; v != "" {
		detail["view"] = v
	}
	if !alive {
		detail["lost"] = fmt.Sprintf("container %s is %s", c.Name, c.State)
		if c.State == container.StateRunning {
			detail["lost"] = fmt.Sprintf("container %s runs but its runboxd does not answer", c.Name)
		}
	}
	if d := c.stateDir(); d != "" {
		detail["dir"] = d
	}
	var spec specLabel
	if json.Unmarshal([]byte(c.Labels[LabelSpec]), &spec) == nil {
		if spec.Workdir != "" {
			detail["workdir"] = spec.Workdir
		}
		detail["network"] = spec.Network
	}
	return runbox.Sandbox{
		ID:       c.Labels[LabelSandbox],
		Name:     c.Labels[LabelName],
		Provider: ProviderName,
		Created:  c.created(),
		Alive:    alive,
		Detail:   detail,
	}
}

// containers lists runbox's containers (all states), oldest first; with id
// set, only that sandbox's.
func containers(ctx context.Context, cli *moby.Client, id string) ([]ctr, error) {
	label := LabelSandbox
	if id != "" {
		label += "=" + id
	}
	res, err := cli.ContainerList(ctx, moby.ContainerListOptions{All: true, Filters: make(moby.Filters).Add("label", label)})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", engineError(cli, err))
	}
	out := make([]ctr, 0, len(res.Items))
	for _, s := range res.Items {
		c := fromSummary(s)
		if !validID.MatchString(c.Labels[LabelSandbox]) {
			continue
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b ctr) int {
		if c := a.created().Compare(b.created()); c != 0 {
			return c
		}
		return strings.Compare(a.Labels[LabelSandbox], b.Labels[LabelSandbox])
	})
	return out, nil
}

// match picks the container named by key: an exact sandbox id, then an exact
// name, then a unique id prefix.
func match(cs []ctr, key string) (ctr, error) {
	return sandboxkey.Match(cs, key, func(c ctr) string { return c.Labels[LabelSandbox] }, func(c ctr) string { return c.Labels[LabelName] })
}

// alive reports whether c runs and its runboxd answers Info.
func (p *Provider) alive(ctx context.Context, c ctr) bool {
	return c.State == container.StateRunning &&
		probe(ctx, p.dialerFor(c), c.Labels[LabelSandbox]) == nil
}

// Get finds a sandbox by exact id, exact name, or unique id prefix, among
// the engine's containers labelled by runbox, and probes whether its
// runboxd answers. A sandbox this machine made, named exactly, whose
// runboxd answers on its socket, is found without asking the engine.
func (p *Provider) Get(ctx context.Context, idOrName string) (runbox.Sandbox, error) {
	fail := func(err error) (runbox.Sandbox, error) {
		return runbox.Sandbox{}, &runbox.Error{Op: "get", Sandbox: idOrName, Err: err}
	}
	if sb, ok := p.getHere(ctx, idOrName); ok {
		return sb, nil
	}
	cli, err := p.engine()
	if err != nil {
		return fail(err)
	}
	cs, err := containers(ctx, cli, "")
	if err != nil {
		return fail(err)
	}
	c, err := match(cs, idOrName)
	if err != nil {
		return fail(err)
	}
	return p.toSandbox(c, p.alive(ctx, c)), nil
}

// List returns every sandbox the engine has, oldest first, each marked Alive
// when its container runs and its runboxd answers Info.
func (p *Provider) List(ctx context.Context) ([]runbox.Sandbox, error) {
	cli, err := p.engine()
	if err != nil {
		return nil, &runbox.Error{Op: "list", Err: err}
	}
	cs, err := containers(ctx, cli, "")
	if err != nil {
		return nil, &runbox.Error{Op: "list", Err: err}
	}
	out := make([]runbox.Sandbox, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { out[i] = p.toSandbox(c, p.alive(ctx, c)) })
	}
	wg.Wait()
	return out, nil
}

// Dialer returns how to reach the sandbox's runboxd: its socket on this
// machine when the sandbox has one and it is here (and exec streams are not
// forced), else a docker exec of runboxd proxy.
func (p *Provider) Dialer(sb runbox.Sandbox) runbox.Dialer {
	id := sb.Detail["container"]
	if id == "" {
		id = "runbox-sandbox:" + sb.ID // resolved by label at dial time
	}
	return p.withSecret(p.dialer(id, sb.Detail["socket"]), id, "")
}

func (p *Provider) dialer(containerID, socket string) runbox.Dialer {
	forced := p.execForced()
	return func(ctx context.Context) (net.Conn, error) {
		if !forced && socket != "" {
			if fi, err := os.Stat(socket); err == nil && fi.Mode().Type() == fs.ModeSocket {
				var d net.Dialer
				conn, err := d.DialContext(ctx, "unix", socket)
				if err != nil && ctx.Err() == nil {
					return nil, p.lostCause(ctx, containerID, err)
				}
				return conn, err
			}
		}
		return p.dialExec(ctx, containerID)
	}
}

// lostCause explains a failed dial: when the engine says the container is
// gone or not running, the sandbox is lost for good, and the error wraps
// runbox.ErrSandboxLost and names the container; otherwise err is returned
// as it is (the client retries).
func (p *Provider) lostCause(ctx context.Context, containerID string, err error) error {
	cli, cerr := p.engine()
	if cerr != nil || strings.HasPrefix(containerID, "runbox-sandbox:") {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, aliveTimeout)
	defer cancel()
	ir, ierr := cli.ContainerInspect(ctx, containerID, moby.ContainerInspectOptions{})
	switch {
	case cerrdefs.IsNotFound(ierr):
		return fmt.Errorf("%w: container %.12s is gone: %w", runbox.ErrSandboxLost, containerID, err)
	case ierr == nil && ir.Container.State != nil && !ir.Container.State.Running:
		st := ir.Container.State
		return fmt.Errorf("%w: container %.12s is %s (exit code %d%s): %w",
			runbox.ErrSandboxLost, containerID, st.Status, st.ExitCode, errSuffix(st.Error), err)
	}
	return err
}

// dialExec opens a stream to runboxd through a docker exec of runboxd
// proxy, hijacked through the Engine API.
func (p *Provider) dialExec(ctx context.Context, containerID string) (net.Conn, error) {
	cli, err := p.engine()
	if err != nil {
		return nil, err
	}
	if sbID, ok := strings.CutPrefix(containerID, "runbox-sandbox:"); ok {
		cs, err := containers(ctx, cli, sbID)
		if err != nil {
			return nil, err
		}
		if len(cs) == 0 {
			return nil, fmt.Errorf("no container for sandbox %s: %w", sbID, runbox.ErrSandboxNotFound)
		}
		containerID = cs[0].ID
	}
	// The same Tty flag (false) goes to create and attach: the engine then
	// multiplexes the output, which execConn takes apart.
	ec, err := cli.ExecCreate(ctx, containerID, moby.ExecCreateOptions{
		Cmd: proxyCmd, AttachStdin: true, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		err = fmt.Errorf("docker exec runboxd proxy in %.12s: %w", containerID, err)
		if cerrdefs.IsConflict(err) || cerrdefs.IsNotFound(err) {
			err = p.lostCause(ctx, containerID, err)
		}
		return nil, err
	}
	ar, err := cli.ExecAttach(ctx, ec.ID, moby.ExecAttachOptions{})
	if err != nil {
		return nil, fmt.Errorf("attach to docker exec %.12s in %.12s: %w", ec.ID, containerID, err)
	}
	return newExecConn(ar.Conn, ar.Reader, ar.CloseWrite, ec.ID), nil
}

// Remove stops every exec with the stop protocol (the Shutdown RPC through
// runboxd), waits for the container to stop, removes it, and deletes the
// sandbox's host state directory.
//
// A container that already stopped (docker kill, an engine restart) is
// removed without force: when PID 1 exits the kernel kills every process in
// the container, so nothing it started can have outlived it. Force matters
// for a running container whose runboxd does not answer: without it Remove
// fails with runbox.ErrSandboxLost; with it the container is killed.
func (p *Provider) Remove(ctx context.Context, sb runbox.Sandbox, force bool) error {
	fail := func(err error) error { return &runbox.Error{Op: "remove", Sandbox: sb.ID, Err: err} }
	if !validID.MatchString(sb.ID) {
		return fail(runbox.ErrSandboxNotFound)
	}
	cli, err := p.engine()
	if err != nil {
		return fail(err)
	}
	cs, err := containers(ctx, cli, sb.ID)
	if err != nil {
		return fail(err)
	}
	// Where the state directory is: the container's label says; without a
	// container, this provider's home (or what the caller was told).
	dirs := []string{}
	if home, err := p.home(); err == nil {
		dirs = append(dirs, filepath.Join(home, "docker", sb.ID))
	}
	if d := sb.Detail["dir"]; d != "" && filepath.Base(d) == sb.ID {
		dirs = append(dirs, d)
	}
	for _, c := range cs {
		if d := c.stateDir(); d != "" {
			dirs = append(dirs, d)
		}
	}
	removeDirs := func() (bool, error) {
		found := false
		for _, d := range dirs {
			if _, err := os.Stat(d); err != nil {
				continue
			}
			found = true
			if err := os.RemoveAll(d); err != nil {
				return found, fmt.Errorf("remove %s: %w", d, err)
			}
		}
		return found, nil
	}
	if len(cs) == 0 {
		found, err := removeDirs()
		if err != nil {
			return fail(err)
		}
		if !found {
			return fail(runbox.ErrSandboxNotFound)
		}
		return nil
	}
	for _, c := range cs {
		if err := p.removeContainer(ctx, cli, c, force); err != nil {
			return fail(err)
		}
	}
	if _, err := removeDirs(); err != nil {
		return fail(err)
	}
	return nil
}

// removeContainer shuts c's runboxd down and removes c.
func (p *Provider) removeContainer(ctx context.Context, cli *moby.Client, c ctr, force bool) error {
	if c.State == container.StateRunning {
		sctx := ctx
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			sctx, cancel = context.WithTimeout(ctx, shutdownTimeout)
			defer cancel()
		}
		rc := rbclient.New(p.dialerFor(c), rbclient.WithSandboxName(c.Labels[LabelSandbox]))
		// An error is expected when runboxd exits before its answer gets
		// out; whether it stopped is decided by the container's state.
		shutdownErr := rc.Shutdown(sctx, 0)
		rc.Close()
		if !waitStopped(ctx, cli, c.ID, exitTimeout) && shutdownErr != nil && !force {
			return fmt.Errorf("%w: runboxd in running container %.12s does not answer (%v); remove it with force",
				runbox.ErrSandboxLost, c.ID, shutdownErr)
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if _, err := cli.ContainerRemove(rctx, c.ID, moby.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %.12s: %w", c.ID, err)
	}
	return nil
}

// waitStopped waits up to d for the container to stop running and reports
// whether it did.
func waitStopped(ctx context.Context, cli *moby.Client, id string, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	w := cli.ContainerWait(ctx, id, moby.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-w.Result:
		return true
	case err := <-w.Error:
		return cerrdefs.IsNotFound(err)
	}
}
