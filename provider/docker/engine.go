package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	moby "github.com/moby/moby/client"
)

// ErrLimitUnsupported means the spec asks for a resource limit the engine
// cannot enforce here (rootless Podman on cgroup v1, a cgroup controller
// not delegated to the engine's user, an engine without the cgroup): the
// sandbox is refused rather than made without the limit. It also matches
// errors.ErrUnsupported.
var ErrLimitUnsupported = errors.New("the engine cannot enforce this resource limit")

// Engine kinds, as Detail["engine"] and LabelEngine name them.
const (
	kindDocker = "docker"
	kindPodman = "podman"
)

// LabelEngine records which engine made the sandbox's container, as
// EngineInfo.String says it (e.g. "podman 4.3.1 rootless, cgroup v1").
const LabelEngine = "runbox.engine"

// EngineInfo is what the provider knows of the engine it talks to.
type EngineInfo struct {
	// Kind is "docker" or "podman".
	Kind    string
	Version string
	// Rootless is a rootless engine (Podman run by a plain user, or
	// rootless Docker).
	Rootless bool
	// UID is the host user a rootless Podman runs as (-1: root or
	// unknown): its containers' root is that user.
	UID int
	// Cgroup is the cgroup version of the engine's host ("1", "2", "").
	Cgroup string
	// Memory, Pids and CPU say whether the engine enforces each limit.
	Memory, Pids, CPU bool
	// Why says, when a limit is not enforced, why not.
	Why string
	// AppArmor says the engine confines containers with AppArmor.
	AppArmor bool
}

// String describes the engine in one line, for inspect.
func (e EngineInfo) String() string {
	s := e.Kind + " " + e.Version
	var notes []string
	if e.Rootless {
		notes = append(notes, "rootless")
	}
	if e.Cgroup != "" {
		notes = append(notes, "cgroup v"+e.Cgroup)
	}
	if len(notes) > 0 {
		s += " (" + strings.Join(notes, ", ") + ")"
	}
	return s
}

// checkLimits refuses a spec whose limits the engine would not enforce.
func (e EngineInfo) checkLimits(memory, pids int64, cpus float64) error {
	var missing []string
	if memory > 0 && !e.Memory {
		missing = append(missing, "memory")
	}
	if pids > 0 && !e.Pids {
		missing = append(missing, "pids")
	}
	if cpus > 0 && !e.CPU {
		missing = append(missing, "cpus")
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s on %s: %s; create the sandbox without it, or use an engine that can (docs/podman.md): %w",
		ErrLimitUnsupported, strings.Join(missing, ", "), e, e.Why, errors.ErrUnsupported)
}

// probeEngine asks the engine what it is: Docker or Podman (the version's
// components say), rootless or not, and which limits it enforces. Docker's
// /info says the latter; Podman's compatible /info claims every limit even
// where it drops them with a warning (rootless on cgroup v1), so for Podman
// its own /libpod/info is asked.
func probeEngine(ctx context.Context, cli *moby.Client) (EngineInfo, error) {
	v, err := cli.ServerVersion(ctx, moby.ServerVersionOptions{})
	if err != nil {
		return EngineInfo{}, fmt.Errorf("engine version: %w", engineError(cli, err))
	}
	e := EngineInfo{Kind: kindDocker, Version: v.Version, UID: -1}
	for _, c := range v.Components {
		if c.Name == "Podman Engine" {
			e.Kind, e.Version = kindPodman, c.Version
		}
	}
	if e.Kind == kindPodman {
		if err := e.podmanInfo(ctx, cli); err != nil {
			return EngineInfo{}, err
		}
		return e, nil
	}
	info, err := cli.Info(ctx, moby.InfoOptions{})
	if err != nil {
		return EngineInfo{}, fmt.Errorf("engine info: %w", engineError(cli, err))
	}
	in := info.Info
	e.Cgroup = in.CgroupVersion
	for _, o := range in.SecurityOptions {
		e.Rootless = e.Rootless || strings.Contains(o, "name=rootless")
		e.AppArmor = e.AppArmor || strings.Contains(o, "name=apparmor")
	}
	e.Memory, e.Pids, e.CPU = in.MemoryLimit, in.PidsLimit, in.CPUCfsQuota
	e.Why = "the engine reports no support for it (docker info)"
	return e, nil
}

// libpodInfo is the part of Podman's /libpod/info the provider reads.
type libpodInfo struct {
	Host struct {
		CgroupVersion     string   `json:"cgroupVersion"`
		CgroupControllers []string `json:"cgroupControllers"`
		Security          struct {
			Rootless bool `json:"rootless"`
			AppArmor bool `json:"apparmorEnabled"`
		} `json:"security"`
		IDMappings struct {
			UIDMap []struct {
				ContainerID int `json:"container_id"`
				HostID      int `json:"host_id"`
			} `json:"uidmap"`
		} `json:"idMappings"`
	} `json:"host"`
}

// podmanInfo fills e from Podman's own API (/v4.0.0/libpod/info), on the
// engine's socket or TCP address.
func (e *EngineInfo) podmanInfo(ctx context.Context, cli *moby.Client) error {
	host := cli.DaemonHost()
	// One request: no connection is kept (nor a goroutine serving it).
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Timeout: 2 * time.Minute, Transport: tr}
	url := ""
	switch {
	case strings.HasPrefix(host, "unix://"):
		sock := strings.TrimPrefix(host, "unix://")
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
		url = "http://podman/v4.0.0/libpod/info"
	case strings.HasPrefix(host, "tcp://"):
		url = "http://" + strings.TrimPrefix(host, "tcp://") + "/v4.0.0/libpod/info"
	default:
		return fmt.Errorf("podman at %s: cannot ask it which limits it enforces (only unix:// and tcp:// engines): %w", host, errors.ErrUnsupported)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("podman info: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("podman info at %s: %w", host, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("podman info at %s: %s", host, resp.Status)
	}
	var li libpodInfo
	if err := json.NewDecoder(resp.Body).Decode(&li); err != nil {
		return fmt.Errorf("podman info at %s: %w", host, err)
	}
	e.Rootless = li.Host.Security.Rootless
	e.AppArmor = li.Host.Security.AppArmor
	e.Cgroup = strings.TrimPrefix(li.Host.CgroupVersion, "v")
	if e.Rootless {
		for _, m := range li.Host.IDMappings.UIDMap {
			if m.ContainerID == 0 {
				e.UID = m.HostID
			}
		}
	}
	if e.Rootless && e.Cgroup == "1" {
		// Podman runs rootless containers without a cgroup of their own on
		// cgroup v1, dropping every limit with a warning.
		e.Why = "rootless Podman has no cgroup on a cgroup v1 host (it would drop the limit with a warning); run Podman as root, or boot with cgroup v2 and delegate the controllers to the user"
		return nil
	}
	have := map[string]bool{}
	for _, c := range li.Host.CgroupControllers {
		have[c] = true
	}
	e.Memory, e.Pids, e.CPU = have["memory"], have["pids"], have["cpu"]
	e.Why = fmt.Sprintf("its containers' cgroup has the controllers %v only (a rootless user gets the ones systemd delegates: Delegate=memory pids cpu in user@.service)", li.Host.CgroupControllers)
	return nil
}

// Podman's API sockets, where `podman system service` (or its systemd
// socket unit) listens by default: the user's, then root's.
const podmanRootSocket = "/run/podman/podman.sock"

// engineHost decides which engine a Provider without DOCKER_HOST talks to:
// Docker's socket when something answers there, else the first of
// Podman's usual sockets that answers (the user's under $XDG_RUNTIME_DIR
// or /run/user/UID, then root's), else Docker's socket (whose error then
// says nothing answers). "" means DOCKER_HOST is set: the client's
// environment decides.
func engineHost() string {
	if os.Getenv("DOCKER_HOST") != "" {
		return ""
	}
	docker := strings.TrimPrefix(moby.DefaultDockerHost, "unix://")
	for _, s := range append([]string{docker}, podmanSockets()...) {
		if answers(s) {
			return "unix://" + s
		}
	}
	return ""
}

// podmanSockets lists Podman's usual API sockets for this user.
func podmanSockets() []string {
	var out []string
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		out = append(out, filepath.Join(x, "podman", "podman.sock"))
	}
	if uid := os.Geteuid(); uid != 0 {
		s := filepath.Join("/run/user", strconv.Itoa(uid), "podman", "podman.sock")
		if len(out) == 0 || out[0] != s {
			out = append(out, s)
		}
	}
	return append(out, podmanRootSocket)
}

// answers reports whether a unix socket accepts a connection (permission
// to connect included).
func answers(socket string) bool {
	conn, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// NewEngineClient returns a client for the engine a Provider without an
// Engine talks to: DOCKER_HOST and the rest of the client environment when
// DOCKER_HOST is set; otherwise Docker's socket if it answers, else the
// first of Podman's usual sockets that does ($XDG_RUNTIME_DIR/podman/
// podman.sock, /run/user/UID/podman/podman.sock, /run/podman/podman.sock).
func NewEngineClient() (*moby.Client, error) {
	opts := []moby.Opt{moby.FromEnv}
	if h := engineHost(); h != "" {
		opts = append(opts, moby.WithHost(h))
	}
	c, err := moby.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	return c, nil
}

// LabelStreamWhy says why a sandbox on a local engine is reached through
// docker exec instead of its bind-mounted socket.
const LabelStreamWhy = "runbox.stream-why"

// socketStream reports whether a process running as uid can use the
// bind-mounted socket stream with this engine, and if not, why. A rootless
// engine's containers are its user (root in them is that user, the rest
// are its subordinate ids): they cannot enter a state directory another
// user made 0700, nor can that user's runboxd make its socket there.
func (e EngineInfo) socketStream(uid int) (bool, string) {
	if !e.Rootless || e.UID < 0 || e.UID == uid {
		return true, ""
	}
	return false, fmt.Sprintf("the engine (%s) runs as uid %d and this process as uid %d: its containers cannot enter this user's state directory, so runboxd is reached through docker exec", e, e.UID, uid)
}
