package local_test

import (
	"bytes"
	"context"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/provider/local"
)

// TestCgoRunboxdRefusedClearly: a runboxd built with cgo (go build's
// default where a C compiler is found) cannot jail itself; making a
// sandbox with it fails with an error that says how to build it, not with
// a failed system call's name.
func TestCgoRunboxdRefusedClearly(t *testing.T) {
	needLocal(t)
	if _, err := osexec.LookPath("gcc"); err != nil {
		t.Skip("no C compiler here: a runboxd built with cgo cannot be made")
	}
	bin := filepath.Join(t.TempDir(), "runboxd")
	build := osexec.Command("go", "build", "-o", bin, "github.com/runbox/runbox/cmd/runboxd")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build runboxd with cgo: %v\n%s", err, out)
	}
	if elf, err := os.ReadFile(bin); err != nil || !bytes.Contains(elf, []byte("ld-linux")) {
		t.Fatalf("runboxd built with CGO_ENABLED=1 names no dynamic loader (%v): it was not built with cgo, nothing to test", err)
	}
	p := &local.Provider{Home: t.TempDir(), Runboxd: bin}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := p.Create(ctx, runbox.SandboxSpec{Workdir: t.TempDir()})
	if err == nil {
		_ = p.Remove(context.Background(), sb, true)
		t.Fatal("a sandbox was made with a runboxd built with cgo; want a refusal")
	}
	if !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("create with a runboxd built with cgo: %v; want the error to say to build it with CGO_ENABLED=0", err)
	}
	t.Logf("%v", err)
	if ids, _ := filepath.Glob(filepath.Join(p.Home, "sandboxes", "[0-9a-f]*")); len(ids) != 0 {
		t.Errorf("the failed create left sandbox records behind: %v", ids)
	}
}
