package cli_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/processrecord"
	"github.com/runbox/runbox/internal/strangertest"
)

// TestRefusesAHomeOthersMayWrite: root's runbox home lies where another
// user (the stranger) may write (a 0777 directory at a random path), and
// the stranger planted a host sandbox's record (random id) naming a fresh
// root process of the caller's as its runboxd. Every command that reads
// the home exits 125 saying whose directory it is and what to do, and the
// process lives; version still runs. Before the rule, `runbox rm -f ID`
// SIGKILLed the process the stranger chose (and `ls` listed the planted
// sandbox): root acted on a stranger's record.
func TestRefusesAHomeOthersMayWrite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to be the privileged user the stranger aims at")
	}
	home := strangertest.SharedHome(t)
	t.Setenv("RUNBOX_HOME", home)
	t.Setenv("DOCKER_HOST", "unix://"+home+"/no-docker-engine.sock")
	t.Setenv("KUBECONFIG", home+"/no-kubeconfig")
	t.Setenv("RUNBOX_PROVIDER", "host")

	victim := exec.Command("sleep", "1000")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { victim.Wait(); close(exited) }()
	t.Cleanup(func() { victim.Process.Kill(); <-exited })
	_, start, err := processrecord.ProcStat(victim.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	id := strangertest.RandomHex(12)
	dir := filepath.Join(home, "sandboxes", id)
	rec := processrecord.Record{ID: id, Provider: processrecord.HostProvider, Created: time.Now(),
		Pid: victim.Process.Pid, StartTime: start, BootID: processrecord.BootID(), Socket: filepath.Join(dir, "runboxd.sock")}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sandbox.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Dir(dir), dir, filepath.Join(dir, "sandbox.json")} {
		if err := os.Chown(p, strangertest.UID, strangertest.UID); err != nil {
			t.Fatal(err)
		}
	}

	for _, args := range [][]string{{"rm", "-f", id}, {"ls"}, {"exec", id, "--", "true"}, {"up"}} {
		o := rb(t, args...)
		if o.code != 125 || !strings.Contains(o.stderr, home) || !strings.Contains(o.stderr, "RUNBOX_HOME") {
			t.Errorf("runbox %s in a home others may write: exit %d, stderr %q; want 125 naming %s and what to do", strings.Join(args, " "), o.code, o.stderr, home)
		}
		if strings.Contains(o.stdout, id) {
			t.Errorf("runbox %s showed the planted sandbox: %q", strings.Join(args, " "), o.stdout)
		}
	}
	select {
	case <-exited:
		t.Fatalf("the process the planted record named (pid %d) was killed", victim.Process.Pid)
	case <-time.After(200 * time.Millisecond):
	}
	if o := rb(t, "version"); o.code != 0 {
		t.Errorf("version where the home is refused: exit %d, %q", o.code, o.stderr)
	}
	if _, err := os.Stat(filepath.Join(home, "names")); err == nil {
		t.Errorf("runbox wrote in the refused home")
	}
}
