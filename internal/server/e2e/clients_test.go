package e2e_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// repoRoot is the module's root directory.
func repoRoot(t testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// need returns the path of program, failing when require is set in the
// environment and skipping (saying how to get it) otherwise.
func need(t testing.TB, program, require, how string) string {
	t.Helper()
	p, err := exec.LookPath(program)
	if err == nil {
		return p
	}
	if os.Getenv(require) == "1" {
		t.Fatalf("%s is required (%s=1) but not found: %v", program, require, err)
	}
	t.Skipf("%s not found (%v): %s", program, err, how)
	return ""
}

// TestPythonExample runs examples/python/runbox_client.py, which uses only
// Python's standard library, against a real server.
func TestPythonExample(t *testing.T) {
	python := need(t, "python3", "RUNBOX_REQUIRE_PYTHON", "install python3 (apt-get install python3)")
	sp := startServe(t)
	cmd := exec.Command(python, filepath.Join(repoRoot(t), "examples", "python", "runbox_client.py"))
	cmd.Env = append(os.Environ(), "RUNBOX_HOST="+sp.url, "RUNBOX_TOKEN="+sp.token("py"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python example: %v\n%s", err, out)
	}
	for _, want := range []string{"exit 3", "stdout hello from python", "stderr oops", "timed_out True exit 143", "error not_found", "deleted"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	rows := sp.auditRows("--tenant", "py")
	kinds := ""
	for _, r := range rows {
		kinds += r["kind"].(string) + " "
	}
	if kinds != "create exec exec delete " {
		t.Errorf("audit kinds %q", kinds)
	}
}

// TestCurlREADME runs the README's curl example (the sh block after the
// "curl-example" marker) against a real server.
func TestCurlREADME(t *testing.T) {
	need(t, "curl", "RUNBOX_REQUIRE_CURL", "install curl (apt-get install curl)")
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "<!-- curl-example -->")
	if !ok {
		t.Fatal("README.md has no <!-- curl-example --> marker")
	}
	_, block, _ := strings.Cut(after, "```sh\n")
	block, _, _ = strings.Cut(block, "```")
	sp := startServe(t)
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Env = append(sp.env(), "RUNBOX_HOST="+sp.url, "RUNBOX_TOKEN="+sp.token("curl"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README's curl example: %v\n%s\n%s", err, block, out)
	}
	// Run's answer: "hello" in base64, then Delete's empty answer.
	if !strings.Contains(string(out), `"stdout":"aGVsbG8K"`) {
		t.Fatalf("README's curl example printed:\n%s", out)
	}
	rows := sp.auditRows("--tenant", "curl")
	if len(rows) != 3 || rows[0]["kind"] != "create" || rows[1]["kind"] != "exec" || rows[2]["kind"] != "delete" {
		t.Fatalf("audit rows: %v", rows)
	}
}

// TestNodeClient generates a Node.js client from the project's proto
// (protoc-gen-es) and runs it with @connectrpc/connect-node: it creates a
// sandbox over Connect JSON, streams an exec over gRPC, cancels it, and
// deletes the sandbox. Needs `npm ci` in testdata/node (CI does it).
func TestNodeClient(t *testing.T) {
	node := need(t, "node", "RUNBOX_REQUIRE_NODE", "install Node.js 20+ and run npm ci in internal/server/e2e/testdata/node")
	dir, _ := filepath.Abs(filepath.Join("testdata", "node"))
	plugin := filepath.Join(dir, "node_modules", ".bin", "protoc-gen-es")
	if _, err := os.Stat(plugin); err != nil {
		if os.Getenv("RUNBOX_REQUIRE_NODE") == "1" {
			t.Fatalf("%s: %v (run npm ci in %s)", plugin, err, dir)
		}
		t.Skipf("%s missing: run npm ci in %s", plugin, dir)
	}
	gen := filepath.Join(dir, "gen")
	os.RemoveAll(gen)
	tmpl, _ := json.Marshal(map[string]any{"version": "v2", "plugins": []map[string]any{
		{"local": plugin, "out": gen, "opt": "target=js,import_extension=js"}}})
	bufGen := exec.Command("go", "tool", "buf", "generate", "--template", string(tmpl))
	bufGen.Dir = repoRoot(t)
	if out, err := bufGen.CombinedOutput(); err != nil {
		t.Fatalf("generate the Node.js client: %v\n%s", err, out)
	}
	sp := startServe(t)
	cmd := exec.Command(node, "client.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "RUNBOX_HOST="+sp.url, "RUNBOX_TOKEN="+sp.token("node"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node client: %v\n%s", err, out)
	}
	var got struct {
		Sandbox   string `json:"sandbox"`
		Exec      string `json:"exec"`
		Ticks     int    `json:"ticks"`
		Cancelled bool   `json:"cancelled"`
		ExitCode  int    `json:"exit_code"`
		Killed    int    `json:"killed"`
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	var last string
	for sc.Scan() {
		last = sc.Text()
	}
	if err := json.Unmarshal([]byte(last), &got); err != nil {
		t.Fatalf("node client output: %v\n%s", err, out)
	}
	if got.Ticks < 3 || !got.Cancelled || got.ExitCode != 143 || got.Killed < 1 {
		t.Fatalf("node client: %+v\n%s", got, out)
	}
	for _, r := range sp.auditRows("--sandbox", got.Sandbox) {
		if r["kind"] == "exec" && r["exec_id"] == got.Exec {
			if r["cancelled"] != true || r["outcome"] != "cancelled" {
				t.Fatalf("audit row of the cancelled exec: %v", r)
			}
			return
		}
	}
	t.Fatalf("no audit row for exec %s", got.Exec)
}
