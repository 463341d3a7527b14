package host_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// cgroup2Root returns where the cgroup v2 hierarchy is mounted, or "".
func cgroup2Root() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if ok && strings.HasPrefix(post, "cgroup2 ") {
			if fields := strings.Fields(pre); len(fields) >= 5 {
				return fields[4]
			}
		}
	}
	return ""
}

// sleepers counts live `sleep m` processes on the host, from /proc.
func sleepers(m string) []int {
	names, _ := os.ReadDir("/proc")
	var pids []int
	for _, d := range names {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err == nil && string(cmd) == "sleep\x00"+m+"\x00" && !processGone(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestTimeoutKillsCgroupEscapee is issue 13's attack on the host provider,
// as root: a command moves its shell into the root cgroup (out of its exec's
// cgroup, which runboxd watches), starts `setsid sleep N &` and runs into
// its timeout. The sleep must not survive the timeout; counted on the host
// from /proc.
func TestTimeoutKillsCgroupEscapee(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("moving a process to the root cgroup needs root: run the tests as root (CI does)")
	}
	root := cgroup2Root()
	if root == "" {
		if os.Getenv("RUNBOX_REQUIRE_CGROUP2") == "1" {
			t.Fatal("RUNBOX_REQUIRE_CGROUP2=1 but there is no cgroup v2 hierarchy")
		}
		t.Skip("no cgroup v2 hierarchy on this machine (mount one at /sys/fs/cgroup or /sys/fs/cgroup/unified; RUNBOX_REQUIRE_CGROUP2=1 makes this a failure)")
	}
	p := newProvider(t)
	sb := create(t, p, runbox.SandboxSpec{})
	c := client.New(p.Dialer(sb), client.WithSandboxName(sb.ID))
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if info, err := c.Info(ctx); err != nil || info.CgroupMode != "cgroup2" {
		t.Skipf("the sandbox does not run in cgroup2 mode (%+v, %v)", info, err)
	}
	m := strconv.Itoa(31337000 + rand.IntN(999))
	res, err := c.Exec(ctx, fmt.Sprintf("echo $BASHPID > %s || exit 9; setsid sleep %s & sleep 300",
		filepath.Join(root, "cgroup.procs"), m), client.WithTimeout(time.Second), client.WithGrace(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut {
		t.Fatalf("exit %d, stderr %q: want a timeout (did the escape fail?)", res.ExitCode, res.Stderr)
	}
	if left := sleepers(m); len(left) > 0 {
		t.Errorf("%d `sleep %s` that left the exec's cgroup survived the timeout", len(left), m)
		for _, pid := range left {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
