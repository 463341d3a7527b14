package server_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/runbox/runbox"
)

// post sends body as a Connect JSON call and returns the HTTP status and
// the decoded answer.
func post(t *testing.T, url, token, procedure, sandbox string, body []byte) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+procedure, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	if sandbox != "" {
		req.Header.Set("Runbox-Sandbox", sandbox)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: answer is not JSON: %q", procedure, raw)
	}
	return resp.StatusCode, out
}

// TestBadInput: each bad request gets a clear code and a message naming
// what is wrong, and the server carries on.
func TestBadInput(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	tok := ts.token(t, "a")
	srv := ts.tenant(t, "a")
	sb, err := srv.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	huge := `{"sandboxId":"` + sb.ID + `","spec":{"command":"` + strings.Repeat("x", runbox.MaxMessageBytes+1) + `"}}`
	for _, c := range []struct {
		name, procedure, sandbox, body string
		code                           string
		says                           []string
	}{
		{"malformed JSON", "/runbox.v1.SandboxService/Create", "", `{"spec": {`, "invalid_argument", []string{"unmarshal"}},
		{"wrong type", "/runbox.v1.SandboxService/Create", "", `{"spec": {"pids": "many"}}`, "invalid_argument", []string{"pids"}},
		{"unknown field", "/runbox.v1.SandboxService/Create", "", `{"spec": {"provider": "host", "idleTtl": 5}}`, "invalid_argument", []string{"unknown field", "idleTtl"}},
		{"unknown field in Run", "/runbox.v1.SandboxService/Run", "", `{"sandboxId":"` + sb.ID + `","spec":{"command":"true","timeout":"5s"}}`, "invalid_argument", []string{"unknown field", "timeout"}},
		{"oversized body", "/runbox.v1.SandboxService/Run", "", huge, "resource_exhausted", []string{"larger than"}},
		{"unknown sandbox", "/runbox.v1.SandboxService/Run", "", `{"sandboxId":"sb-nope","spec":{"command":"true"}}`, "not_found", []string{"sb-nope", "no such sandbox"}},
		{"unknown sandbox header", "/runbox.v1.RunboxService/List", "sb-nope", `{}`, "not_found", []string{"sb-nope"}},
		{"no sandbox", "/runbox.v1.RunboxService/List", "", `{}`, "invalid_argument", []string{"Runbox-Sandbox"}},
		{"no sandbox in Run", "/runbox.v1.SandboxService/Run", "", `{"spec":{"command":"true"}}`, "invalid_argument", []string{"sandbox_id"}},
		{"negative timeout", "/runbox.v1.SandboxService/Run", "", `{"sandboxId":"` + sb.ID + `","spec":{"command":"true","timeoutMs":-5}}`, "invalid_argument", []string{"spec.timeout_ms", "negative"}},
		{"negative grace", "/runbox.v1.SandboxService/Run", "", `{"sandboxId":"` + sb.ID + `","spec":{"command":"true","graceMs":"-1"}}`, "invalid_argument", []string{"spec.grace_ms"}},
		{"negative idle TTL", "/runbox.v1.SandboxService/Create", "", `{"spec":{"idleTtlMs":-1}}`, "invalid_argument", []string{"spec.idle_ttl_ms", "negative"}},
		{"negative lifetime", "/runbox.v1.SandboxService/Create", "", `{"spec":{"maxLifetimeMs":-1}}`, "invalid_argument", []string{"spec.max_lifetime_ms"}},
		{"negative memory", "/runbox.v1.SandboxService/Create", "", `{"spec":{"memoryBytes":-1}}`, "invalid_argument", []string{"spec.memory_bytes"}},
		{"unknown provider", "/runbox.v1.SandboxService/Create", "", `{"spec":{"provider":"vm"}}`, "invalid_argument", []string{"spec.provider", "vm", "host"}},
		{"workdir not allowed", "/runbox.v1.SandboxService/Create", "", `{"spec":{"workdir":"/etc"}}`, "invalid_argument", []string{"spec.workdir"}},
		{"no command", "/runbox.v1.SandboxService/Run", "", `{"sandboxId":"` + sb.ID + `","spec":{}}`, "invalid_argument", []string{"no command"}},
		{"no spec", "/runbox.v1.SandboxService/Run", "", `{"sandboxId":"` + sb.ID + `"}`, "invalid_argument", []string{"spec", "missing"}},
		{"shutdown refused", "/runbox.v1.RunboxService/Shutdown", sb.ID, `{}`, "permission_denied", []string{"Delete"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, out := post(t, ts.url, tok, c.procedure, c.sandbox, []byte(c.body))
			if out["code"] != c.code {
				t.Fatalf("HTTP %d %v; want code %s", status, out, c.code)
			}
			msg, _ := out["message"].(string)
			for _, s := range c.says {
				if !strings.Contains(msg, s) {
					t.Errorf("message %q does not say %q", msg, s)
				}
			}
		})
	}
	// The server is fine and the sandbox untouched.
	r, _, err := srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: "echo ok"})
	if err != nil || string(r.Stdout) != "ok\n" {
		t.Fatalf("after bad input: %+v, %v", r, err)
	}
}
