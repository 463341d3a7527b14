package providertest

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// SetuidAttacks are the ways a command tries to leave a setuid or setgid
// file in its working directory, one per line, each allowed to fail (a
// sandbox may lack python3 or GNU tar).
var SetuidAttacks = []string{
	`cp /bin/sh chmod-4755 && chmod 4755 chmod-4755`,
	`cp /bin/sh chmod-2755 && chmod 2755 chmod-2755`,
	`cp /bin/sh chmod-ugs && chmod u+s,g+s chmod-ugs`,
	`install -m 4755 /bin/sh install-4755`,
	`python3 -c 'import os; os.close(os.open("open-4755", os.O_CREAT|os.O_WRONLY, 0o4755))'`,
	`python3 -c 'import os; os.mkdir("mkdir-2755", 0o2755)'`,
	`mkdir -p tarsrc && cp /bin/sh tarsrc/tar-4755 && tar --mode=4755 -cf a.tar -C tarsrc tar-4755 && mkdir -p tarout && tar -xpf a.tar -C tarout`,
}

// SetuidScript is SetuidAttacks as one shell script that always succeeds
// and lists what it made.
func SetuidScript() string {
	return strings.Join(SetuidAttacks, " ; true\n") + " ; true\nls -ln . tarout 2>&1; true"
}

// CheckNoPrivilegeBits fails t for every file under the host directory
// dir that has a setuid or setgid bit, and fatally when the attacks left
// fewer than min files (then the check proves nothing).
func CheckNoPrivilegeBits(t testing.TB, dir string, min int, attackOutput string) {
	t.Helper()
	found := 0
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(path, &st) != nil {
			return nil
		}
		if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			t.Errorf("on the host, %s has mode %o: a privilege bit left the sandbox", path, st.Mode&07777)
		}
		found++
		return nil
	})
	if found < min {
		t.Fatalf("the attacks made %d files; the check proves nothing:\n%s", found, attackOutput)
	}
}
