package local_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/egress"
	"github.com/runbox/runbox/provider/local"
)

// holdConns is run by python3 in the sandbox: it opens TUNNELS CONNECT
// tunnels to TARGET one after the other (keeping the ones answered 200),
// then SLOW connections that send half a CONNECT line and never finish
// it, and waits for answers on those until WANT of them were refused (or
// it gives up). Once all are open it writes OUT.opened and waits for
// OUT.measured; it writes its counts as JSON to OUT and holds every
// connection until the file RELEASE exists; then it closes them all and
// writes DONE.
const holdConns = `
import json, os, resource, select, socket, sys, time
tunnels, slow, want, target, out, release, done = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
res = {"ok": 0, "refused": 0, "other": 0, "slow_refused": 0, "slow_other": 0, "sample": "", "nofile": hard}
held = []
def answer(s):
    data = b""
    while True:
        try:
            b = s.recv(65536)
        except OSError:
            break
        if not b:
            break
        data += b
    return data
for i in range(tunnels):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(1)
        if not b:
            break
        head += b
    if head.startswith(b"HTTP/1.1 200"):
        res["ok"] += 1
        held.append(s)
        continue
    data = head + answer(s)
    s.close()
    if b" 503 " in data.split(b"\r\n")[0] and b"too-many-connections" in data:
        res["refused"] += 1
        res["sample"] = data.decode(errors="replace")
    else:
        res["other"] += 1
        res["sample_other"] = data.decode(errors="replace")
slows = []
for i in range(slow):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(("CONNECT " + target).encode())
    slows.append(s)
open(out + ".opened", "w").close()
while not os.path.exists(out + ".measured"):
    time.sleep(0.05)
give_up = time.time() + 60
byfd = {s.fileno(): s for s in slows}
poller = select.poll()
for fd in byfd:
    poller.register(fd, select.POLLIN)
while byfd and res["slow_refused"] < want and time.time() < give_up:
    for fd, _ in poller.poll(1000):
        poller.unregister(fd)
        s = byfd.pop(fd)
        slows.remove(s)
        data = answer(s)
        s.close()
        if b" 503 " in data.split(b"\r\n")[0] and b"too-many-connections" in data:
            res["slow_refused"] += 1
        else:
            res["slow_other"] += 1
res["slow_open"] = len(slows)
with open(out + ".tmp", "w") as f:
    json.dump(res, f)
os.rename(out + ".tmp", out)
while not os.path.exists(release):
    time.sleep(0.05)
for s in held + slows:
    s.close()
open(done, "w").close()
`

// countFDs counts the open descriptors of process pid, and the sockets
// among them.
func countFDs(t *testing.T, pid int) (all, sockets int) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("descriptors of %d: %v", pid, err)
	}
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			sockets++
		}
	}
	return len(ents), sockets
}

// fdCount formats countFDs' counts and procStatus.
func fdCount(all, sockets, pid int) string {
	return fmt.Sprintf("%d fds (%d sockets; %s)", all, sockets, procStatus(pid))
}

// procStatus returns the Threads and VmRSS lines of /proc/PID/status.
func procStatus(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Threads:") || strings.HasPrefix(l, "VmRSS:") {
			out = append(out, strings.Join(strings.Fields(l), " "))
		}
	}
	return strings.Join(out, ", ")
}

// TestNetworkPrivateConnectionsBounded: a command that opens three times
// egress.MaxConns CONNECT tunnels to an allowed name and holds them gets
// exactly egress.MaxConns of them; the rest are refused at once with a 503
// naming the limit. Then it opens as many half-written CONNECT lines
// (slowloris): runboxd keeps at most egress.MaxPending of them and refuses
// the rest the same way. Meanwhile runboxd's and the host side's
// descriptors (counted in /proc) stay within the bounds, the refusals are
// in the refusal log the audit reads, and once the command lets go the
// counts fall back and a new connection goes through: the sandbox lives on.
func TestNetworkPrivateConnectionsBounded(t *testing.T) {
	p := newProvider(t)
	name := "many-" + freshTag() + ".test"
	port := hostServer(t, "127.0.0.2:0")
	sb, c := create(t, p, runbox.SandboxSpec{Network: local.NetworkPrivate, Egress: runbox.EgressPolicy{
		Allow: []string{name}, AllowCIDR: []string{"127.0.0.2/32"}, Resolve: map[string]string{name: "127.0.0.2"},
	}})
	daemon, _ := strconv.Atoi(sb.Detail["pid"])
	host, _ := strconv.Atoi(sb.Detail["egress_pid"])
	if daemon <= 0 || host <= 0 {
		t.Fatalf("no runboxd or host side pid in %v", sb.Detail)
	}
	target := fmt.Sprintf("%s:%d", name, port)
	// One connection first, so lazily opened parts are in the baseline.
	if got := run(t, c, fmt.Sprintf("curl -sS -p --max-time 20 http://%s/first", target)); got != "host says "+target+"/first" {
		t.Fatalf("first connection: %q", got)
	}
	// That tunnel has ended on the host side too (it holds its connection
	// to runboxd, and nothing else), so that all MaxConns are free.
	hostIdle := settleCount(func() int { _, s := countFDs(t, host); return s }, 1)
	if hostIdle > 1 {
		t.Fatalf("the host side holds %d sockets after the first tunnel ended, want 1 (its connection to runboxd)", hostIdle)
	}
	daemonBefore, daemonSockets := countFDs(t, daemon)
	hostBefore, hostSockets := countFDs(t, host)
	t.Logf("before: runboxd %s, host side %s", fdCount(daemonBefore, daemonSockets, daemon), fdCount(hostBefore, hostSockets, host))

	tunnels, slow := 3*egress.MaxConns, 3*egress.MaxConns
	if n, err := strconv.Atoi(os.Getenv("RUNBOX_TEST_EGRESS_HOLD")); err == nil && n > 0 {
		tunnels, slow = n, n // to measure by hand
	}
	wantSlow := slow - egress.MaxPending
	run(t, c, "cat > /tmp/hold.py <<'EOF'\n"+holdConns+"\nEOF")
	run(t, c, fmt.Sprintf("python3 /tmp/hold.py %d %d %d %s /tmp/res.json /tmp/release /tmp/done >/tmp/hold.log 2>&1 &", tunnels, slow, wantSlow, target))
	var res struct {
		OK, Refused, Other  int
		SlowRefused         int `json:"slow_refused"`
		SlowOther           int `json:"slow_other"`
		SlowOpen            int `json:"slow_open"`
		Sample, SampleOther string
		Nofile              int
	}
	for i := 0; exec(t, c, "test -e /tmp/res.json.opened").ExitCode != 0; i++ {
		if log := run(t, c, "cat /tmp/hold.log"); log != "" || i == 1200 {
			t.Fatalf("the command holding connections: %s", log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// All open: the slow ones past the bound were answered (or are being
	// answered) by runboxd's accept loop, which keeps none.
	daemonOpen, daemonOpenSockets := countFDs(t, daemon)
	hostOpen, hostOpenSockets := countFDs(t, host)
	t.Logf("%d tunnels and %d slow requests open: runboxd %s, host side %s", tunnels, slow, fdCount(daemonOpen, daemonOpenSockets, daemon), fdCount(hostOpen, hostOpenSockets, host))
	run(t, c, "touch /tmp/res.json.measured")
	for i := 0; ; i++ {
		out := exec(t, c, "cat /tmp/res.json 2>/dev/null")
		if out.ExitCode == 0 && json.Unmarshal(out.Stdout, &res) == nil {
			break
		}
		if log := run(t, c, "cat /tmp/hold.log"); log != "" || i == 1200 {
			t.Fatalf("the command holding connections: %s", log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	daemonHeld, daemonHeldSockets := countFDs(t, daemon)
	hostHeld, hostHeldSockets := countFDs(t, host)
	t.Logf("held: %+v", res)
	t.Logf("holding: runboxd %s, host side %s", fdCount(daemonHeld, daemonHeldSockets, daemon), fdCount(hostHeld, hostHeldSockets, host))
	if res.OK != egress.MaxConns || res.Refused != tunnels-egress.MaxConns || res.Other != 0 {
		t.Errorf("%d tunnels opened one after the other: %d carried, %d refused naming the limit, %d otherwise (%q); want %d, %d, 0",
			tunnels, res.OK, res.Refused, res.Other, res.SampleOther, egress.MaxConns, tunnels-egress.MaxConns)
	}
	if res.SlowRefused < wantSlow {
		t.Errorf("%d half-written CONNECT lines: %d refused naming the limit, %d answered otherwise, %d held; want at least %d refused",
			slow, res.SlowRefused, res.SlowOther, res.SlowOpen, wantSlow)
	}
	// runboxd keeps no carried tunnel (it hands each to the host side)
	// and at most MaxPending undecided ones; the host side two sockets
	// per carried tunnel, and up to two pipes for splice(2).
	const slack = 16
	for _, n := range []int{daemonOpen, daemonHeld} {
		if n > daemonBefore+egress.MaxPending+slack {
			t.Errorf("runboxd holds %d descriptors, %d before: more than MaxPending (%d) more", n, daemonBefore, egress.MaxPending)
		}
	}
	for _, n := range []int{hostOpen, hostHeld} {
		if n > hostBefore+6*egress.MaxConns+slack {
			t.Errorf("the host side holds %d descriptors, %d before: more than six per carried connection (%d) more", n, hostBefore, egress.MaxConns)
		}
	}
	// The refusals are in the refusal log the audit reads.
	path := filepath.Join(filepath.Dir(sb.Detail["socket"]), egress.RefusalsFile)
	var counted int64
	for i := 0; counted < int64(res.Refused+res.SlowRefused) && i < 600; i++ {
		rs, err := egress.TakeRefusals(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if strings.Contains(r.Rule, egress.RuleTooManyConnections) {
				counted += r.Count
			}
		}
		if counted < int64(res.Refused+res.SlowRefused) {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if counted < int64(res.Refused+res.SlowRefused) {
		t.Errorf("the refusal log counts %d refusals by %q, the command got %d", counted, egress.RuleTooManyConnections, res.Refused+res.SlowRefused)
	}

	// Released: the counts fall back and the sandbox's egress works.
	run(t, c, "touch /tmp/release")
	for i := 0; exec(t, c, "test -e /tmp/done").ExitCode != 0; i++ {
		if i == 1200 {
			t.Fatalf("the command never let go: %s", run(t, c, "cat /tmp/hold.log"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := run(t, c, fmt.Sprintf("curl -sS -p --max-time 20 http://%s/after", target)); got != "host says "+target+"/after" {
		t.Errorf("a connection after the others ended: %q", got)
	}
	// Sockets: splice(2)'s pipes stay pooled until a collection.
	sockets := func(pid int) func() int {
		return func() int { _, s := countFDs(t, pid); return s }
	}
	daemonAfter := settleCount(sockets(daemon), daemonSockets+slack)
	hostAfter := settleCount(sockets(host), hostSockets+slack)
	da, _ := countFDs(t, daemon)
	ha, _ := countFDs(t, host)
	t.Logf("after: runboxd %s, host side %s", fdCount(da, daemonAfter, daemon), fdCount(ha, hostAfter, host))
	if daemonAfter > daemonSockets+slack || hostAfter > hostSockets+slack {
		t.Errorf("after the command let go: runboxd %d sockets (%d before), host side %d (%d before)", daemonAfter, daemonSockets, hostAfter, hostSockets)
	}
}

// settleCount waits for f to come down to want (closes are asynchronous)
// and returns its last value.
func settleCount(f func() int, want int) int {
	n := f()
	for i := 0; i < 600 && n > want; i++ {
		time.Sleep(100 * time.Millisecond)
		n = f()
	}
	return n
}
