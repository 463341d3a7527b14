package local_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runbox/runbox"
)

// setuidAttacks are the ways a command tries to leave a setuid or setgid
// file in its workspace, one per line, each allowed to fail.
var setuidAttacks = []string{
	`cp /bin/sh chmod-4755 && chmod 4755 chmod-4755`,
	`cp /bin/sh chmod-2755 && chmod 2755 chmod-2755`,
	`cp /bin/sh chmod-ugs && chmod u+s,g+s chmod-ugs`,
	`install -m 4755 /bin/sh install-4755`,
	`python3 -c 'import os; os.close(os.open("open-4755", os.O_CREAT|os.O_WRONLY, 0o4755))'`,
	`python3 -c 'import os; os.mkdir("mkdir-2755", 0o2755)'`,
	`mkdir -p tarsrc && cp /bin/sh tarsrc/tar-4755 && tar --mode=4755 -cf a.tar -C tarsrc tar-4755 && mkdir -p tarout && tar -xpf a.tar -C tarout`,
}

// TestNoSetuidLeavesTheSandbox: whatever a command in a local sandbox does
// (chmod, install -m, open with O_CREAT, mkdir, tar x), no file in its
// workspace carries a setuid or setgid bit on the host (security rule 4).
// Before commands ran under seccomp.PrivilegeRules, chmod 4755 left a
// -rwsr-xr-x root file on the host.
func TestNoSetuidLeavesTheSandbox(t *testing.T) {
	p := newProvider(t)
	ws := t.TempDir()
	_, c := create(t, p, runbox.SandboxSpec{Workdir: ws})
	script := strings.Join(setuidAttacks, " ; true\n") + " ; true\nls -ln . tarout"
	t.Log(run(t, c, script))
	found := 0
	filepath.WalkDir(ws, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := os.Lstat(path)
		if err != nil {
			return nil
		}
		if info.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			t.Errorf("on the host: %s is %v", path, info.Mode())
		}
		found++
		return nil
	})
	if found < 3 {
		t.Fatalf("the attacks made %d files; the test checks nothing", found)
	}
}
