package front

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/internal/dockerrecord"
	"github.com/runbox/runbox/internal/processrecord"
	"github.com/runbox/runbox/internal/strangertest"
)

func TestMain(m *testing.M) { strangertest.Main(m) }

// sharedHome is strangertest.SharedHome, set as $RUNBOX_HOME.
func sharedHome(t *testing.T) string {
	t.Helper()
	home := strangertest.SharedHome(t)
	t.Setenv("RUNBOX_HOME", home)
	t.Setenv("RUNBOX_DOCKER_STREAM", "")
	return home
}

// strangersDir makes dir as the stranger's own (mode 0755), as another
// user who can write in the home makes it before runbox does.
func strangersDir(t *testing.T, dir string) {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, strangertest.UID, strangertest.UID); err != nil {
		t.Fatal(err)
	}
}

// ourSandbox makes this user's state directory of sandbox id in parent
// (0700), with a fresh secret written by write, and returns the secret.
func ourSandbox(t *testing.T, dir string, write func(secret []byte)) []byte {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	secret, err := daemonauth.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	write(secret)
	return secret
}

// stolen moves our sandbox's directory dir aside, as the owner of its
// parent may, and gives the stranger a directory of its own in its place
// holding a link to file (the record or secret the stranger cannot read,
// which the front reads for it). It returns the stranger's directory.
func stolen(t *testing.T, dir, file string) {
	t.Helper()
	aside := filepath.Join(filepath.Dir(dir), "."+strangertest.RandomHex(10))
	if err := os.Rename(dir, aside); err != nil {
		t.Fatal(err)
	}
	strangersDir(t, dir)
	link := filepath.Join(dir, file)
	if err := os.Symlink(filepath.Join(aside, file), link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, strangertest.UID, strangertest.UID); err != nil {
		t.Fatal(err)
	}
}

// squatAsRunboxd runs the stranger at the socket of sandbox id in sbDir
// and writes the sandbox's record (of provider) naming it as runboxd.
func squatAsRunboxd(t *testing.T, sbDir, id, provider string) *strangertest.Squatter {
	t.Helper()
	sock := filepath.Join(sbDir, "runboxd.sock")
	s := strangertest.Squat(t, sock)
	_, start, err := processrecord.ProcStat(s.Pid)
	if err != nil {
		t.Fatal(err)
	}
	rec := processrecord.Record{ID: id, Provider: provider, Created: time.Now(),
		Pid: s.Pid, StartTime: start, BootID: processrecord.BootID(), Socket: sock}
	b, _ := json.Marshal(rec)
	if err := os.WriteFile(filepath.Join(sbDir, "sandbox.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

// refused checks that the front does not reach sandbox id through the
// stranger s, nor sends it the secret: not through resolve, which refuses
// a home others may write in (homes.Trusted), and not through resolveIn
// either, whose own reads and dial must hold in such a home.
func refused(t *testing.T, id string, s *strangertest.Squatter, secret []byte) {
	t.Helper()
	if r, ok := resolve(id); ok {
		r.conn.Close()
		t.Errorf("the front reached the stranger's socket as sandbox %s", id)
	}
	if r, ok := resolveIn(os.Getenv("RUNBOX_HOME"), id); ok {
		r.conn.Close()
		t.Errorf("the front's layer under the home's rule reached the stranger's socket as sandbox %s", id)
	}
	if bytes.Contains(s.Captured(), []byte(hex.EncodeToString(secret))) {
		t.Errorf("the stranger read sandbox %s's secret", id)
	}
}

// TestFrontSendsSecretsOnlyToItsOwn: another local user who can write in
// the runbox home (a home in a shared directory) made its records'
// directory (sandboxes, docker) first, so it may rename what runbox puts
// there: it moves a sandbox's directory (random id) aside, puts its own
// in its place holding a link to the real secret (host, local) or record
// (docker, whose record holds the secret), a record of its own naming its
// own process as runboxd, and listens at the sandbox's socket path.
// `runbox exec ID` in the front must not send the secret to it. Before:
// the front read the real secret through the link and sent it to the
// stranger's socket, for both kinds.
func TestFrontSendsSecretsOnlyToItsOwn(t *testing.T) {
	for range 3 {
		t.Run("host", func(t *testing.T) {
			home := sharedHome(t)
			id := strangertest.RandomHex(12)
			sandboxes := filepath.Join(home, "sandboxes")
			strangersDir(t, sandboxes)
			sbDir := filepath.Join(sandboxes, id)
			secret := ourSandbox(t, sbDir, func(secret []byte) {
				if err := os.WriteFile(filepath.Join(sbDir, processrecord.SecretFile), secret, 0o600); err != nil {
					t.Fatal(err)
				}
			})
			stolen(t, sbDir, processrecord.SecretFile)
			s := squatAsRunboxd(t, sbDir, id, processrecord.HostProvider)
			refused(t, id, s, secret)
		})
		t.Run("docker", func(t *testing.T) {
			home := sharedHome(t)
			id := strangertest.RandomHex(12)
			strangersDir(t, dockerrecord.Dir(home))
			stateDir := filepath.Join(dockerrecord.Dir(home), id)
			sock := filepath.Join(stateDir, "run", "runboxd.sock")
			secret := ourSandbox(t, stateDir, func(secret []byte) {
				c := dockerrecord.Container{ID: strangertest.RandomHex(64), Name: "runbox-" + id, Labels: map[string]string{
					dockerrecord.LabelSandbox: id, dockerrecord.LabelSocket: sock,
					dockerrecord.LabelSecret: hex.EncodeToString(secret)}}
				b, _ := json.Marshal(c)
				if err := os.WriteFile(filepath.Join(stateDir, dockerrecord.ContainerFile), b, 0o600); err != nil {
					t.Fatal(err)
				}
			})
			stolen(t, stateDir, dockerrecord.ContainerFile)
			s := strangertest.Squat(t, sock)
			refused(t, id, s, secret)
		})
	}
}

// TestFrontDoesNotWaitOnPlantedFiles: a FIFO, a link or a huge file
// planted (at a random sandbox id) where the front reads a record or a
// secret: a host sandbox's record or secret, a docker sandbox's record, an
// ssh sandbox's record or secret. `runbox exec ID` must not wait on the
// FIFO's writer, nor read through the link or the whole huge file: resolve
// returns (and the front hands the exec to runbox-full). Before: it waited
// for good on each FIFO.
func TestFrontDoesNotWaitOnPlantedFiles(t *testing.T) {
	t.Setenv("RUNBOX_DOCKER_STREAM", "")
	t.Setenv("RUNBOX_FULL", "/bin/true") // an endpoint is never reached: the secret's read fails first
	plants := map[string]func(p string) error{
		"fifo": func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"link": func(p string) error { return os.Symlink("/dev/zero", p) },
		"huge": func(p string) error {
			f, err := os.Create(p)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Truncate(1 << 31)
		},
	}
	// Each case: the directory under the home, the file planted, and what
	// else is there (a valid record for a planted secret).
	_, start, err := processrecord.ProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ dir, file string }{
		{"sandboxes", "sandbox.json"},
		{"sandboxes", "secret"},
		{"docker", dockerrecord.ContainerFile},
		{"ssh", "sandbox.json"},
		{"ssh", "secret"},
	}
	for kind, plant := range plants {
		for _, c := range cases {
			home := t.TempDir()
			t.Setenv("RUNBOX_HOME", home)
			id := strangertest.RandomHex(12)
			dir := filepath.Join(home, c.dir, id)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if c.file == "secret" {
				// A record that passes, so the secret is read next: this
				// process as runboxd, listening.
				sock := filepath.Join(dir, "runboxd.sock")
				ln, err := net.Listen("unix", sock)
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				rec := processrecord.Record{ID: id, Provider: processrecord.HostProvider, Created: time.Now(),
					Pid: os.Getpid(), StartTime: start, BootID: processrecord.BootID(), Socket: sock}
				b, _ := json.Marshal(rec)
				if err := os.WriteFile(filepath.Join(dir, "sandbox.json"), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := plant(filepath.Join(dir, c.file)); err != nil {
				t.Fatal(err)
			}
			done := make(chan bool, 1)
			go func() {
				r, ok := resolve(id)
				if ok {
					r.conn.Close()
				}
				done <- ok
			}()
			select {
			case ok := <-done:
				if ok {
					t.Errorf("%s %s/%s: resolved", kind, c.dir, c.file)
				}
			case <-time.After(time.Minute): // a hang, not a slow answer
				t.Fatalf("%s %s/%s: resolve still waits after a minute", kind, c.dir, c.file)
			}
		}
	}
}

// TestFrontReachesTheHomeOwnersRunboxd: root working in a user's own home
// (0700) reaches a sandbox whose runboxd runs as that user (a rootless
// local sandbox, say), here the stranger's process: the owner of a home no
// one else may write in holds its secrets anyway.
func TestFrontReachesTheHomeOwnersRunboxd(t *testing.T) {
	home := filepath.Join(strangertest.TraversableDir(t), strangertest.RandomHex(8))
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("RUNBOX_HOME", home)
	id := strangertest.RandomHex(12)
	sbDir := filepath.Join(home, "sandboxes", id)
	if err := os.MkdirAll(sbDir, 0o700); err != nil {
		t.Fatal(err)
	}
	secret, err := daemonauth.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sbDir, processrecord.SecretFile), secret, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{home, filepath.Dir(sbDir), sbDir} {
		if err := os.Chown(p, strangertest.UID, strangertest.UID); err != nil {
			t.Fatal(err)
		}
	}
	squatAsRunboxd(t, sbDir, id, processrecord.LocalProvider)
	r, ok := resolve(id)
	if !ok {
		t.Fatalf("root did not reach sandbox %s of its home's owner", id)
	}
	r.conn.Close()
}
