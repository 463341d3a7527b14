package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/provider/host"
)

// sandboxes makes the run's sandboxes once and removes them at the end.
type sandboxes struct {
	cfg     *config
	made    map[string]string // provider → sandbox id
	ctr     string            // a plain container for the docker exec baseline
	clients []*client.Client
}

// runbox runs the built CLI and returns its stdout.
func (s *sandboxes) runbox(args ...string) (string, error) {
	return s.runboxEnv(nil, args...)
}

// runboxEnv is runbox in the environment env (nil: this process's).
func (s *sandboxes) runboxEnv(env []string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(s.cfg.bin, "runbox"), args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("runbox %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// get returns the sandbox of provider, made on first use; "" when the
// provider cannot run here (said once in the log).
func (s *sandboxes) get(provider string) string {
	if provider == "docker" {
		return s.getWith(provider, "--image", "runbox-test:busybox", "--network", "none")
	}
	return s.getWith(provider, "--workdir", s.cfg.workdir)
}

// getWith is get with the `runbox up` flags to make the sandbox with.
func (s *sandboxes) getWith(provider string, flags ...string) string {
	if id, ok := s.made[provider]; ok {
		return id
	}
	if s.made == nil {
		s.made = map[string]string{}
	}
	// Named, so exec by name can be measured beside exec by id.
	args := append([]string{"up", "--provider", provider, "--name", sandboxName(provider)}, flags...)
	id, err := s.runbox(args...)
	if err != nil {
		log.Printf("no %s sandbox, its rows are left out: %v", provider, err)
	}
	s.made[provider] = id
	return id
}

// sandboxName is the name of provider's sandbox.
func sandboxName(provider string) string { return "bench-" + provider }

// hostClient returns a Go client of the host sandbox.
func (s *sandboxes) hostClient(ctx context.Context) (*client.Client, error) {
	id := s.get("host")
	if id == "" {
		return nil, fmt.Errorf("no host sandbox")
	}
	return s.clientOf(ctx, id)
}

func (s *sandboxes) clientOf(ctx context.Context, id string) (*client.Client, error) {
	p := &host.Provider{Home: s.cfg.home}
	sb, err := p.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	c := client.New(p.Dialer(sb), client.WithSandboxName(id))
	s.clients = append(s.clients, c)
	return c, nil
}

// container returns a plain running container (no runbox) for the docker
// exec baseline, or "".
func (s *sandboxes) container() string {
	if s.ctr != "" {
		return s.ctr
	}
	out, err := exec.Command("docker", "run", "-d", "--rm", "--network", "none", "runbox-test:busybox", "sleep", "86400").Output()
	if err != nil {
		log.Printf("no docker container, docker exec is left out: %v", err)
		s.ctr = "-"
		return s.ctr
	}
	s.ctr = strings.TrimSpace(string(out))
	return s.ctr
}

func (s *sandboxes) removeAll() {
	for _, c := range s.clients {
		c.Close()
	}
	for _, id := range s.made {
		if id != "" {
			if _, err := s.runbox("rm", "-f", id); err != nil {
				log.Printf("cleanup: %v", err)
			}
		}
	}
	if s.ctr != "" && s.ctr != "-" {
		exec.Command("docker", "rm", "-f", s.ctr).Run()
	}
}

// daemonPid returns the host pid of the runboxd serving the host or local
// sandbox id.
func (s *sandboxes) daemonPid(id string) (int, error) {
	detail, err := inspectDetail(s.runbox, id)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(detail["pid"])
}

// inspectDetail is the Detail `runbox inspect` prints for sandbox id, run
// through runbox.
func inspectDetail(runbox func(args ...string) (string, error), id string) (map[string]string, error) {
	out, err := runbox("inspect", id)
	if err != nil {
		return nil, err
	}
	var sb struct {
		Detail map[string]string `json:"detail"`
	}
	if err := json.Unmarshal([]byte(out), &sb); err != nil {
		return nil, fmt.Errorf("runbox inspect %s: %w", id, err)
	}
	return sb.Detail, nil
}

// cpuSeconds returns the CPU time (user+system) process pid has used.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100 // clock ticks (USER_HZ = 100)
}

// statusKB returns a field of /proc/pid/status in KiB (VmRSS, VmHWM).
func statusKB(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// resetPeakRSS starts VmHWM afresh for pid.
func resetPeakRSS(pid int) {
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// Stat summarises samples (milliseconds, or whatever unit they are in).
type Stat struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	P10    float64 `json:"p10"`
	P90    float64 `json:"p90"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

func stat(xs []float64) Stat {
	if len(xs) == 0 {
		return Stat{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Stat{N: len(s), Median: quantile(s, 0.5), P10: quantile(s, 0.1), P90: quantile(s, 0.9), Min: s[0], Max: s[len(s)-1]}
}

// quantile of sorted xs, by linear interpolation.
func quantile(xs []float64, q float64) float64 {
	pos := q * float64(len(xs)-1)
	i := int(pos)
	if i+1 >= len(xs) {
		return xs[len(xs)-1]
	}
	return xs[i] + (pos-float64(i))*(xs[i+1]-xs[i])
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// timeCmd runs argv once and returns its wall time.
func timeCmd(argv []string) (time.Duration, error) {
	return timeRun(exec.Command(argv[0], argv[1:]...))
}

// timeRun runs cmd and returns its wall time.
func timeRun(cmd *exec.Cmd) (time.Duration, error) {
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("%s: %w", strings.Join(cmd.Args, " "), err)
	}
	return d, nil
}
