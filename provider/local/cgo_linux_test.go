package local_test

import (
	"context"
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/runboxdbin"
	"github.com/runbox/runbox/provider/local"
)

// TestCgoRunboxdRefusedClearly: a runboxd built with cgo (go build's
// default where a C compiler is found) cannot jail itself. Making a
// sandbox with one fails with an error that says how to build it, not
// with a failed system call's name ("drop capability 2: operation not
// supported", before): a dynamically linked one is refused before
// anything is made (runboxdbin.ErrNotStatic), a static one built with cgo
// by the jail when it starts.
func TestCgoRunboxdRefusedClearly(t *testing.T) {
	needLocal(t)
	if _, err := osexec.LookPath("gcc"); err != nil {
		t.Skip("no gcc in PATH, so no runboxd built with cgo can be made: run `apt-get install gcc libc6-dev` (.ci/run installs both), then this test again")
	}
	for _, c := range []struct {
		name    string
		ldflags string
		want    error
	}{
		{"dynamic", "", runboxdbin.ErrNotStatic},
		{"static", "-linkmode=external -extldflags=-static", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "runboxd")
			build := osexec.Command("go", "build", "-ldflags", c.ldflags, "-o", bin, "github.com/runbox/runbox/cmd/runboxd")
			build.Env = append(os.Environ(), "CGO_ENABLED=1")
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("build runboxd with cgo: %v\n%s", err, out)
			}
			p := &local.Provider{Home: t.TempDir(), Runboxd: bin}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			sb, err := p.Create(ctx, runbox.SandboxSpec{Workdir: t.TempDir()})
			if err == nil {
				_ = p.Remove(context.Background(), sb, true)
				t.Fatal("a sandbox was made with a runboxd built with cgo; want a refusal")
			}
			t.Log(err)
			if !strings.Contains(err.Error(), "CGO_ENABLED=0") {
				t.Errorf("create with a runboxd built with cgo: %v; want the error to say to build it with CGO_ENABLED=0", err)
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("create with a dynamically linked runboxd: %v; want %v", err, c.want)
			}
			if ids, _ := filepath.Glob(filepath.Join(p.Home, "sandboxes", "[0-9a-f]*")); len(ids) != 0 {
				t.Errorf("the failed create left sandbox records behind: %v", ids)
			}
		})
	}
}
