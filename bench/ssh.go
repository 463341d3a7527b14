package main

import (
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/runbox/runbox/internal/loopbacksshd"
)

// sshBench is the ssh sandbox of the latency section and its baseline: a
// loopback sshd (internal/loopbacksshd, the one provider/ssh's tests log
// in to), a sandbox on it made through the CLI, and an OpenSSH
// ControlMaster connection to the same server.
type sshBench struct {
	s      *sandboxes
	server *loopbacksshd.Server
	home   string   // HOME of the sandbox's runbox commands: .ssh holds the client side
	env    []string // their environment
	id     string
	master *loopbacksshd.ControlMaster
}

// sshSandbox starts the loopback sshd, makes an ssh sandbox on it with
// `runbox up --ssh`, and opens a ControlMaster to it; nil when this
// machine cannot (said once in the log). The caller must close it.
//
// The CLI finds the host as ssh would, in $HOME/.ssh (config, known_hosts),
// so the sandbox's commands run with a HOME of their own; the endpoint the
// first exec starts inherits it.
func (s *sandboxes) sshSandbox() *sshBench {
	if why := loopbacksshd.Probe(); why != "" {
		log.Printf("no loopback sshd, the ssh rows are left out: %s", why)
		return nil
	}
	b, err := s.startSSH()
	if err != nil {
		log.Printf("no ssh sandbox, the ssh rows are left out: %v", err)
		b.close()
		return nil
	}
	return b
}

func (s *sandboxes) startSSH() (*sshBench, error) {
	b := &sshBench{s: s, home: filepath.Join(filepath.Dir(s.cfg.home), "ssh-home")}
	server, err := loopbacksshd.Start()
	if err != nil {
		return b, err
	}
	b.server = server
	login, err := loopbacksshd.LoginUser()
	if err != nil {
		return b, err
	}
	dotSSH := filepath.Join(b.home, ".ssh")
	if err := os.MkdirAll(dotSSH, 0o700); err != nil {
		return b, fmt.Errorf("ssh home: %w", err)
	}
	client, err := server.WriteClient(dotSSH, login)
	if err != nil {
		return b, err
	}
	// No agent: the client side's key is the only one offered.
	b.env = append(os.Environ(), "HOME="+b.home, "SSH_AUTH_SOCK=")
	if b.id, err = s.runboxEnv(b.env, "up", "--provider", "ssh", "--name", sandboxName("ssh"), "--ssh", loopbacksshd.Alias); err != nil {
		return b, err
	}
	if b.master, err = client.OpenControlMaster(filepath.Join(dotSSH, "ctl.sock")); err != nil {
		return b, err
	}
	return b, nil
}

// exec times `runbox exec ID -- true` on the ssh sandbox.
func (b *sshBench) exec() (time.Duration, error) {
	cmd := exec.Command(filepath.Join(b.s.cfg.bin, "runbox"), "exec", b.id, "--", "true")
	cmd.Env = b.env
	return timeRun(cmd)
}

// ssh times `ssh rbx true` through the ControlMaster.
func (b *sshBench) ssh() (time.Duration, error) { return timeRun(b.master.Command("true")) }

// close removes the sandbox (while its host still answers, so nothing of
// it stays there), closes the master and stops the server. A nil b is
// closed already.
func (b *sshBench) close() {
	if b == nil {
		return
	}
	if b.id != "" {
		if _, err := b.s.runboxEnv(b.env, "rm", "-f", b.id); err != nil {
			log.Printf("cleanup: %v", err)
		}
	}
	if b.master != nil {
		if err := b.master.Close(); err != nil {
			log.Printf("cleanup: %v", err)
		}
	}
	if b.server != nil {
		b.server.Close()
	}
	os.RemoveAll(b.home)
}
