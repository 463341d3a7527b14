package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// serveRun is a runbox serve the bench starts for the serve row: one host
// sandbox made through it, and a Go client of that sandbox through it.
type serveRun struct {
	cmd    *exec.Cmd
	exited chan struct{}
	srv    *client.Server
	sb     runbox.Sandbox
	c      *client.Client
}

// startServe runs runbox-server serve on a loopback port with a database
// of its own under the run's home, makes a token and a host sandbox
// through it.
func startServe(ctx context.Context, cfg *config) (*serveRun, error) {
	server := filepath.Join(cfg.bin, "runbox-server")
	db := filepath.Join(cfg.home, "serve.db")
	tok, err := exec.Command(server, "token", "create", "--tenant", "bench", "--db", db).Output()
	if err != nil {
		return nil, fmt.Errorf("token create: %w", err)
	}
	s := &serveRun{exited: make(chan struct{})}
	s.cmd = exec.Command(server, "serve", "--providers", "host", "--allow-host-provider", "--listen", "127.0.0.1:0", "--db", db)
	pr, pw := io.Pipe()
	s.cmd.Stderr = pw
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.cmd.Wait(); pw.Close(); close(s.exited) }()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving" {
				addr <- line.Addr
			}
		}
	}()
	var url string
	select {
	case a := <-addr:
		url = "http://" + a
	case <-s.exited:
		return nil, fmt.Errorf("runbox serve exited")
	case <-time.After(60 * time.Second):
		s.stop(ctx)
		return nil, fmt.Errorf("runbox serve did not start within a minute")
	}
	if s.srv, err = client.NewServer(url, strings.TrimSpace(string(tok))); err != nil {
		s.stop(ctx)
		return nil, err
	}
	if s.sb, err = s.srv.Create(ctx, runbox.SandboxSpec{}); err != nil {
		s.stop(ctx)
		return nil, fmt.Errorf("create through serve: %w", err)
	}
	s.c = s.srv.Sandbox(s.sb.ID)
	return s, nil
}

// stop removes the sandbox and stops the server.
func (s *serveRun) stop(ctx context.Context) {
	if s.c != nil {
		s.c.Close()
	}
	if s.srv != nil {
		if s.sb.ID != "" {
			_ = s.srv.Remove(ctx, s.sb, true)
		}
		s.srv.Close()
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}
