package ssh

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		in, user, host string
		port           int
		bad            bool
	}{
		{in: "box", host: "box"},
		{in: "me@box", user: "me", host: "box"},
		{in: "me@box:2222", user: "me", host: "box", port: 2222},
		{in: "a@b@box", user: "a@b", host: "box"},
		{in: "[::1]:22", host: "::1", port: 22},
		{in: "[fe80::1]", host: "fe80::1"},
		{in: "ssh://me@box:23", user: "me", host: "box", port: 23},
		{in: "@box", bad: true},
		{in: "box:0", bad: true},
		{in: "box:99999", bad: true},
		{in: "box:http", bad: true},
		{in: "", bad: true},
		{in: "me@", bad: true},
		{in: "a b", bad: true},
	} {
		u, h, p, err := parseTarget(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("parseTarget(%q) = %q %q %d; want an error", tc.in, u, h, p)
			}
			continue
		}
		if err != nil || u != tc.user || h != tc.host || p != tc.port {
			t.Errorf("parseTarget(%q) = %q %q %d, %v; want %q %q %d", tc.in, u, h, p, err, tc.user, tc.host, tc.port)
		}
	}
}

// The configuration's values apply to an alias, the first value wins, a
// user or port in the target wins over the configuration's, and ProxyJump
// chains resolve each hop through the configuration too.
func TestResolveConfig(t *testing.T) {
	dir := t.TempDir()
	conf := `Host box
  HostName 10.0.0.7
  User builder
  Port 2200
  IdentityFile ~/.ssh/box_key
  IdentityFile %d/.ssh/second
  ProxyJump hop2

Host hop1
  HostName 10.0.0.1
  User j1

Host hop2
  HostName 10.0.0.2
  Port 2202
  ProxyJump hop1

Host *
  User fallback
  Port 2999
  ProxyCommand none
  UserKnownHostsFile ~/kh1 ~/kh2
  StrictHostKeyChecking accept-new
`
	path := filepath.Join(dir, "config")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &Provider{ConfigFile: path}
	cfg, err := p.loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	home := cfg.home
	e, err := cfg.resolve("box", 0)
	if err != nil {
		t.Fatal(err)
	}
	if e.Host != "10.0.0.7" || e.User != "builder" || e.Port != 2200 {
		t.Errorf("box resolved to %s", e)
	}
	if want := []string{home + "/.ssh/box_key", home + "/.ssh/second"}; strings.Join(e.IdentityFiles, ",") != strings.Join(want, ",") {
		t.Errorf("identity files %q, want %q", e.IdentityFiles, want)
	}
	if len(e.Jumps) != 2 || e.Jumps[0].Host != "10.0.0.1" || e.Jumps[0].User != "j1" || e.Jumps[0].Port != 2999 ||
		e.Jumps[1].Host != "10.0.0.2" || e.Jumps[1].Port != 2202 || e.Jumps[1].User != "fallback" {
		t.Errorf("jumps %v, want j1@10.0.0.1:2999 then fallback@10.0.0.2:2202", e.Jumps)
	}
	if !e.AcceptNew || strings.Join(e.KnownHosts, ",") != home+"/kh1,"+home+"/kh2" {
		t.Errorf("accept-new %v, known hosts %q", e.AcceptNew, e.KnownHosts)
	}
	e, err = cfg.resolve("other@box:22", 0)
	if err != nil || e.User != "other" || e.Port != 22 || e.Host != "10.0.0.7" {
		t.Errorf("other@box:22 resolved to %s, %v", e, err)
	}
	if err := os.WriteFile(path, []byte("Host pc\n  ProxyCommand nc %h %p\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _ = p.loadConfig()
	if _, err := cfg.resolve("pc", 0); err == nil || !strings.Contains(err.Error(), "ProxyJump") {
		t.Errorf("a ProxyCommand host: %v; want an error pointing to ProxyJump", err)
	}
	if err := os.WriteFile(path, []byte("Host loop\n  ProxyJump loop\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _ = p.loadConfig()
	if _, err := cfg.resolve("loop", 0); err == nil {
		t.Error("a ProxyJump loop resolved")
	}
}
