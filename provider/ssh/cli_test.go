package ssh_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"
)

// TestCLI drives the real runbox binary against the test sshd as a user
// would, with the SSH setup in $HOME/.ssh (config alias, key, known_hosts):
// an unknown host key is exit 125 naming the fingerprint; --ssh-accept-new
// records it; exec returns the command's status; inspect says how the
// host contains commands; rm leaves no state on the host.
func TestCLI(t *testing.T) {
	e := newEnv(t, nonRootUser(t))
	c := newCLIEnv(t, e, false) // no known_hosts: the first up meets an unknown host key
	dotSSH := filepath.Join(c.home, ".ssh")
	runbox := func(args ...string) (int, string, string) {
		t.Helper()
		return c.run(t, args...)
	}

	code, _, stderr := runbox("up", "--ssh", "rbx", "--name", "remote")
	fp := gossh.FingerprintSHA256(e.sshd.HostKey)
	if code != 125 || !strings.Contains(stderr, fp) || !strings.Contains(stderr, "--ssh-accept-new") {
		t.Fatalf("up with an unknown host key: status %d, stderr %q; want 125 naming %s", code, stderr, fp)
	}
	code, stdout, stderr := runbox("up", "--provider", "ssh", "--ssh", "rbx", "--ssh-accept-new", "--name", "remote")
	if code != 0 {
		t.Fatalf("up --ssh-accept-new: status %d: %s", code, stderr)
	}
	id := strings.TrimSpace(stdout)
	if kh, _ := os.ReadFile(filepath.Join(dotSSH, "known_hosts")); !strings.Contains(string(kh), strings.TrimSpace(string(gossh.MarshalAuthorizedKey(e.sshd.HostKey)))) {
		t.Errorf("known_hosts after --ssh-accept-new: %q", kh)
	}

	code, stdout, stderr = runbox("exec", "remote", "--", "id -un; echo err >&2; exit 3")
	if code != 3 || stdout != e.user+"\n" || stderr != "err\n" {
		t.Errorf("exec: status %d, stdout %q, stderr %q; want 3, %q, \"err\\n\"", code, stdout, stderr, e.user+"\n")
	}

	code, stdout, stderr = runbox("inspect", "remote")
	var insp struct {
		ID     string            `json:"id"`
		Detail map[string]string `json:"detail"`
		Daemon *struct {
			CgroupMode string `json:"cgroup_mode"`
		} `json:"daemon"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &insp) != nil || insp.Daemon == nil {
		t.Fatalf("inspect: status %d, %s %s", code, stdout, stderr)
	}
	if insp.Daemon.CgroupMode != "proc" || insp.Detail["containment"] != "proc" {
		t.Errorf("inspect says cgroup_mode %q, containment %q; want proc for a plain user here", insp.Daemon.CgroupMode, insp.Detail["containment"])
	}
	remoteDir := insp.Detail["remote_dir"]

	if code, _, stderr = runbox("rm", "remote"); code != 0 {
		t.Fatalf("rm: status %d: %s", code, stderr)
	}
	if _, err := os.Stat(remoteDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the sandbox's state directory %s after rm: %v", remoteDir, err)
	}
	if n := withEnvVar(t, "RUNBOX_SANDBOX="+id); n != 0 {
		t.Errorf("%d process(es) of the sandbox after rm", n)
	}
	if code, _, stderr = runbox("exec", "remote", "--", "true"); code != 125 || !strings.Contains(stderr, "no such sandbox") {
		t.Errorf("exec after rm: status %d, %q; want 125, no such sandbox", code, stderr)
	}
}
