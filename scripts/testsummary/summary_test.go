package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runGoTestJSON runs `go test -json` on a throwaway module whose tests
// pass, skip and fail as asked, and returns its event stream: the real
// format, not a hand-written imitation.
func runGoTestJSON(t *testing.T, tests string) []byte {
	t.Helper()
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.26\n")
	write("m_test.go", "package m\n\nimport \"testing\"\n\n"+tests)
	cmd := exec.Command("go", "test", "-json", "-count=1", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	out, _ := cmd.Output() // a failing test exits 1: the stream is what counts
	if len(out) == 0 {
		t.Fatal("go test -json printed nothing")
	}
	return out
}

func summarise(t *testing.T, stream []byte) (string, bool) {
	t.Helper()
	var out bytes.Buffer
	s := newSummary(&out)
	if err := s.read(bytes.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	ok := s.report()
	return out.String(), ok
}

func TestSkipsListedWithReasons(t *testing.T) {
	stream := runGoTestJSON(t, `
func TestPass(t *testing.T) {}
func TestNoDocker(t *testing.T) { t.Log("looking"); t.Skip("no Docker engine: start dockerd") }
func TestSub(t *testing.T) { t.Run("inner", func(t *testing.T) { t.Skipf("needs %s\nand more", "sshd") }) }
func TestKlog(t *testing.T) {
	t.Cleanup(func() { println("E1203 16:16:11.199190   21877 v2.go:168] \"Copying stderr failed\"") })
	t.Skip("no cluster here: set KUBECONFIG to run it")
}
`)
	out, ok := summarise(t, stream)
	if !ok {
		t.Errorf("a run with passes and skips failed:\n%s", out)
	}
	for _, want := range []string{
		"3 skipped tests:",
		"SKIP example.com/m TestKlog: m_test.go:11: no cluster here: set KUBECONFIG to run it",
		"SKIP example.com/m TestNoDocker: m_test.go:7: no Docker engine: start dockerd",
		"SKIP example.com/m TestSub/inner: m_test.go:8: needs sshd | and more",
		"tests: 2 passed, 0 failed, 3 skipped",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "=== RUN") {
		t.Errorf("summary of a passing run shows verbose lines:\n%s", out)
	}
}

func TestFailureFailsAndShowsOutput(t *testing.T) {
	out, ok := summarise(t, runGoTestJSON(t, `func TestBad(t *testing.T) { t.Error("wrong answer") }`))
	if ok {
		t.Errorf("a failing run passed:\n%s", out)
	}
	if !strings.Contains(out, "--- FAIL: TestBad") || !strings.Contains(out, "wrong answer") || !strings.Contains(out, "FAIL example.com/m TestBad") {
		t.Errorf("summary of a failure:\n%s", out)
	}
}

func TestKilledRunFails(t *testing.T) {
	stream := runGoTestJSON(t, `func TestPass(t *testing.T) {}`)
	// Cut the stream before the package's result, as a killed go test does.
	cut := stream[:bytes.Index(stream, []byte(`"Action":"pass","Package":"example.com/m","Elapsed"`))]
	cut = cut[:bytes.LastIndexByte(cut, '\n')+1]
	if out, ok := summarise(t, cut); ok || !strings.Contains(out, "no result") {
		t.Errorf("a stream without the package's result passed:\n%s", out)
	}
}

func TestSlowestTestsListed(t *testing.T) {
	stream := runGoTestJSON(t, `
import "time"

func TestQuick(t *testing.T) {}
func TestSlow(t *testing.T) { time.Sleep(300 * time.Millisecond); t.Run("sub", func(t *testing.T) {}) }
func TestSkipped(t *testing.T) { t.Skip("not here") }
`)
	out, _ := summarise(t, stream)
	slow, quick := strings.Index(out, "s example.com/m TestSlow\n"), strings.Index(out, "s example.com/m TestQuick\n")
	if !strings.Contains(out, "2 slowest tests:") || slow < 0 || quick < 0 || slow > quick {
		t.Errorf("summary does not list the two timed tests, slowest first:\n%s", out)
	}
	if strings.Contains(out, "TestSlow/sub\n") || strings.Contains(out, "s example.com/m TestSkipped") {
		t.Errorf("the slowest list has a subtest or a skipped test:\n%s", out)
	}
}
