package local_test

import (
	"crypto/rand"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/runbox/runbox/internal/providertest"
)

// TestRootlessInvariants runs the security rules' attacks in a rootless
// local sandbox (`runbox run` as an unprivileged user, a user namespace
// holding only that user): a fresh root-only file in a fresh 0700
// directory at a random path stays unreadable (rule 1), a descriptor the
// caller left open without close-on-exec on a fresh directory reaches no
// command (rule 3), and no setuid or setgid file appears in the workspace
// (rule 4).
func TestRootlessInvariants(t *testing.T) {
	needLocal(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to plant root-only files and switch to an unprivileged user: run the tests as root (CI does)")
	}
	dir, home, ws := nobodyDirs(t)

	// Rule 1: a root-only secret at a random place.
	secretDir, err := os.MkdirTemp("/var/tmp", "rbroot")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(secretDir) })
	if err := os.Chmod(secretDir, 0o700); err != nil {
		t.Fatal(err)
	}
	secretFile := filepath.Join(secretDir, "secret-"+rand.Text())
	rootSecret := "root-only-" + rand.Text()
	if err := os.WriteFile(secretFile, []byte(rootSecret), 0o600); err != nil {
		t.Fatal(err)
	}

	// Rule 3: the caller's leaked descriptor, on a directory the user may
	// read (so only the descriptor's crossing matters).
	leak := providertest.LeakDir(t)
	for _, p := range []string{leak.Dir, filepath.Join(leak.Dir, leak.Name)} {
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}

	script := strings.Join([]string{
		"id -u",
		"cat " + secretFile + " 2>&1; ls -l " + secretDir + " 2>&1",
		leak.ProbeCommand(),
		providertest.SetuidScript(),
		"true",
	}, "\n")
	cmd := osexec.Command(filepath.Join(dir, "runbox"), "run", "--", script)
	cmd.Dir = ws
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "RUNBOX_HOME=" + home,
		"RUNBOX_RUNBOXD=" + filepath.Join(dir, "runboxd"), "DOCKER_HOST=unix://" + filepath.Join(home, "no-docker.sock")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("runbox run as uid %d: %v\n%s", nobody, err, out)
	}
	if first, _, _ := strings.Cut(string(out), "\n"); strings.TrimSpace(first) != "0" {
		t.Fatalf("the sandbox is not a rootless one (id -u inside: %q):\n%s", first, out)
	}
	if strings.Contains(string(out), rootSecret) {
		t.Errorf("rule 1: the root-only %s was read in a rootless sandbox:\n%s", secretFile, out)
	}
	if strings.Contains(string(out), leak.Secret) || strings.Contains(string(out), leak.Dir) {
		t.Errorf("rule 3: the caller's descriptor %d on %s reached the command:\n%s", leak.FD, leak.Dir, out)
	}
	providertest.CheckNoPrivilegeBits(t, ws, 3, string(out))
}
