package local_test

import (
	"archive/tar"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/local"
)

// reusedInodes is how many host directories TestFuseRootHostInodeReuse
// shows the FUSE server and then deletes, and how many files and
// directories the sandbox then makes.
const reusedInodes = 200

// TestFuseRootHostInodeReuse: a sandbox with no disk bound (--disk 0)
// whose FUSE server has seen host files that the host then deletes still
// makes files and directories, and tar x sets their owners and times.
//
// fuse-overlayfs knows a file by the inode number and device of what it
// stands on, and keeps what it has seen of the host's root for as long as
// it runs. Before, with --disk 0 the upper layer lay on the home's
// filesystem, the host root's own: a file the sandbox made could get the
// inode number of a host directory the server had seen and the host had
// since deleted, and the server took the new file for that directory:
// mkdir answered ENOENT (the directory made all the same), tar's utime and
// chown of a file just written ENOENT. The test puts the home and the
// deleted directories side by side in a fresh directory, where the
// filesystem hands the freed numbers to the next files made there.
func TestFuseRootHostInodeReuse(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the FUSE root is root's (rootless sandboxes read the host with the caller's rights)")
	}
	base := hostRootDir(t)
	victims := filepath.Join(base, "v")
	if err := os.Mkdir(victims, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < reusedInodes; i++ {
		if err := os.Mkdir(filepath.Join(victims, fmt.Sprint("d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ws := t.TempDir()
	writeOwnedTar(t, filepath.Join(ws, "a.tar"))
	p := providerIn(t, base)
	_, c := create(t, p, runbox.SandboxSpec{Workdir: ws, Disk: local.Unlimited})
	if got := strings.TrimSpace(run(t, c, "ls "+victims+" | wc -l")); got != fmt.Sprint(reusedInodes) {
		t.Fatalf("the sandbox lists %s entries in %s, want %d", got, victims, reusedInodes)
	}
	for i := 0; i < reusedInodes; i++ {
		if err := os.Remove(filepath.Join(victims, fmt.Sprint("d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// tar x as root sets owners and times; then a directory and a
	// touched, chowned file at a time.
	script := fmt.Sprintf(`mkdir /var/tmp/x && tar -C /var/tmp/x -xf /workspace/a.tar || exit 1
cd /var/tmp && bad=0 && i=0
while [ $i -lt %d ]; do
	mkdir d$i || bad=$((bad+1))
	echo x > f$i && touch -d @%d f$i && chown 7:8 f$i || bad=$((bad+1))
	i=$((i+1))
done
echo $bad; stat -c '%%u:%%g %%Y' x/f0 x/f%d f0 f%d | sort | uniq -c`, reusedInodes, touchTime, reusedInodes-1, reusedInodes-1)
	res := exec(t, c, script)
	if res.ExitCode != 0 {
		t.Fatalf("tar x into /var/tmp: exit %d, stderr:\n%s", res.ExitCode, firstLines(string(res.Stderr), 10))
	}
	want := fmt.Sprintf("0\n      2 123:456 %d\n      2 7:8 %d\n", tarTime.Unix(), touchTime)
	if got := string(res.Stdout); got != want {
		t.Errorf("failures, then owners and times of the files made:\n%s\nwant:\n%s\nstderr:\n%s", got, want, firstLines(string(res.Stderr), 10))
	}
}

// touchTime is the modification time the test's touch gives (unix seconds).
const touchTime = 981158400

// tarTime is the modification time of the files in writeOwnedTar's
// archive.
var tarTime = time.Date(2001, 1, 1, 12, 0, 0, 0, time.UTC)

// writeOwnedTar writes at path a tar archive of reusedInodes small files,
// f0, f1, ..., owned by 123:456, modified at tarTime.
func writeOwnedTar(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	for i := 0; i < reusedInodes; i++ {
		body := fmt.Sprintln("file", i)
		hdr := &tar.Header{Name: fmt.Sprint("f", i), Mode: 0o644, Size: int64(len(body)), Uid: 123, Gid: 456, ModTime: tarTime, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// firstLines is s's first n lines.
func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// hostRootDir returns a fresh directory under /var/tmp, open to all,
// removed when t ends; it skips t unless runbox runs as root (the FUSE root
// is root's) and /var/tmp is on the host root's filesystem (the one a
// sandbox sees through its FUSE root).
func hostRootDir(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the FUSE root is root's (rootless sandboxes read the host with the caller's rights)")
	}
	needLocal(t)
	base, err := os.MkdirTemp("/var/tmp", "rbfz")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	var root, st syscall.Stat_t
	if err := syscall.Stat("/", &root); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(base, &st); err != nil {
		t.Fatal(err)
	}
	if st.Dev != root.Dev {
		t.Skip("/var/tmp is not on the host root's filesystem: a sandbox does not see it through its FUSE root")
	}
	return base
}

// providerIn returns a local provider whose home is base/h.
func providerIn(t *testing.T, base string) *local.Provider {
	t.Helper()
	bin, err := providertest.BuildRunboxd()
	if err != nil {
		t.Fatal(err)
	}
	return &local.Provider{Home: filepath.Join(base, "h"), Runboxd: bin}
}

// TestFuseRootStress (RUNBOX_TEST_FUSE_STRESS=1; about a minute): 4
// sandboxes with no disk bound, made at once, each run 300 rounds of
// mkdir, rename, create, touch, chown, unlink and rmdir in /var/tmp while
// the host makes and deletes directories beside their home and the
// sandboxes list them, as a busy host does; no operation may fail. On the
// old code (upper layer on the host root's filesystem) operations failed
// with ENOENT as new files took the numbers of host directories the FUSE
// servers had seen.
func TestFuseRootStress(t *testing.T) {
	if os.Getenv("RUNBOX_TEST_FUSE_STRESS") != "1" {
		t.Skip("a stress test: RUNBOX_TEST_FUSE_STRESS=1 runs it")
	}
	base := hostRootDir(t)
	churn := filepath.Join(base, "c")
	if err := os.Mkdir(churn, 0o755); err != nil {
		t.Fatal(err)
	}
	p := providerIn(t, base)
	const sandboxes, rounds = 4, 300
	clients := make([]func(string) runbox.Result, sandboxes)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			sb, err := p.Create(ctx, runbox.SandboxSpec{Workdir: t.TempDir(), Disk: local.Unlimited})
			if err != nil {
				t.Errorf("create: %v", err)
				return
			}
			t.Cleanup(func() { p.Remove(context.Background(), sb, true) })
			c := client.New(p.Dialer(sb), client.WithSandboxName(sb.ID))
			t.Cleanup(func() { c.Close() })
			mu.Lock()
			clients[i] = func(cmd string) runbox.Result {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				res, err := c.Exec(ctx, cmd)
				if err != nil {
					t.Errorf("exec: %v", err)
				}
				return res
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// The host: directories made and deleted beside the home, for as long
	// as the sandboxes run.
	stop := make(chan struct{})
	var host sync.WaitGroup
	host.Add(1)
	go func() {
		defer host.Done()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			d := filepath.Join(churn, strconv.Itoa(n%64))
			if err := os.Mkdir(d, 0o755); err != nil {
				os.Remove(d)
			}
		}
	}()
	script := fmt.Sprintf(`cd /var/tmp && bad=0 && i=0
while [ $i -lt %d ]; do
	ls %s >/dev/null
	mkdir d$i && mv d$i e$i || bad=$((bad+1))
	echo x > f$i && touch -d @%d f$i && chown 7:8 f$i && rm f$i || bad=$((bad+1))
	rmdir e$i || bad=$((bad+1))
	i=$((i+1))
done
echo $bad`, rounds, churn, touchTime)
	var runs sync.WaitGroup
	for i, run := range clients {
		runs.Add(1)
		go func() {
			defer runs.Done()
			res := run(script)
			if res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != "0" {
				t.Errorf("sandbox %d: exit %d, %s failed rounds of %d; stderr:\n%s", i, res.ExitCode, strings.TrimSpace(string(res.Stdout)), rounds, firstLines(string(res.Stderr), 10))
			}
		}()
	}
	runs.Wait()
	close(stop)
	host.Wait()
}
