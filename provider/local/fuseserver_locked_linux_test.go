package local_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/jail"
)

// mountAttackEnv, set to "1", makes the test binary, run in a FUSE
// server's user and mount namespaces with its credentials (nsenter), act
// as a FUSE server taken over would: try to make every read-only mount it
// has writable and to allow setuid on them, write the files named as
// arguments, then unmount the read-only mounts. It prints one "what path: result" line
// per try instead of running tests (see TestMain).
const mountAttackEnv = "RUNBOX_LOCAL_MOUNT_ATTACK"

// mountAttackMain runs the attack when mountAttackEnv asks for it and
// reports whether it did.
func mountAttackMain() bool {
	if os.Getenv(mountAttackEnv) != "1" {
		return false
	}
	report := func(what, path string, err error) {
		if err == nil {
			fmt.Printf("%s %s: allowed\n", what, path)
			return
		}
		fmt.Printf("%s %s: %s\n", what, path, errnoName(err))
	}
	// The power it has: a mount of its own, which only a root of its
	// user namespace with CAP_SYS_ADMIN may make. Every refusal below is
	// then the lock's, not a lack of privilege.
	report("mount", "tmpfs", unix.Mount("tmpfs", jail.FuseServerLayersPath+"/work", "tmpfs", 0, "size=4k"))
	ro := readOnlyMounts()
	for _, m := range ro {
		report("remount-rw", m, unix.Mount("", m, "", unix.MS_REMOUNT|unix.MS_BIND, ""))
		report("setattr-rw", m, unix.MountSetattr(unix.AT_FDCWD, m, 0, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}))
		report("setattr-suid", m, unix.MountSetattr(unix.AT_FDCWD, m, 0, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_NOSUID}))
	}
	for _, f := range os.Args[1:] {
		fd, err := unix.Open(f, unix.O_WRONLY|unix.O_APPEND, 0)
		if err == nil {
			_, err = unix.Write(fd, []byte("tampered\n"))
			unix.Close(fd)
		}
		report("write", f, err)
	}
	for _, m := range ro {
		report("umount", m, unix.Unmount(m, unix.MNT_DETACH))
	}
	return true
}

// readOnlyMounts lists the mount points of the calling process's mount
// namespace that are mounted read-only.
func readOnlyMounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		fmt.Printf("mountinfo: %v\n", err)
		return nil
	}
	defer f.Close()
	var ro []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 5 && slices.Contains(strings.Split(fields[5], ","), "ro") {
			ro = append(ro, fields[4])
		}
	}
	return ro
}

// TestFuseServerCannotUnlockItsTrees: a local sandbox's FUSE server holds
// the host's root and the snapshot layers that every sandbox made from a
// snapshot shares on read-only mounts that the kernel locked (they reach
// it through a namespace copy into its user namespace): taken over, with
// all its own powers (acted out by entering its namespaces with its
// credentials), it can neither make any read-only mount writable, nor
// allow setuid on one, nor unmount one, nor write a file planted at a
// fresh random path in the snapshot. The snapshot, a new sandbox made from
// it and the attacked sandbox itself are unchanged after.
func TestFuseServerCannotUnlockItsTrees(t *testing.T) {
	needRootDisk(t)
	nsenter, err := osexec.LookPath("nsenter")
	if err != nil {
		t.Fatalf("nsenter (util-linux) acts out the taken-over server: %v", err)
	}
	p := newProvider(t)
	ctx := context.Background()
	dir, content := "/opt/t"+randomName(t), "c"+randomName(t)
	base, bc := create(t, p, runbox.SandboxSpec{})
	run(t, bc, fmt.Sprintf("mkdir -p %s && echo %s > %s/planted", dir, content, dir))
	snap, err := p.Snapshot(ctx, base, "locked", runbox.SnapshotOptions{NoWorkspace: true})
	if err != nil {
		t.Fatal(err)
	}
	sb, c := create(t, p, runbox.SandboxSpec{FromSnapshot: snap.Name})
	if got := run(t, c, "cat "+dir+"/planted"); got != content+"\n" {
		t.Fatalf("the sandbox from the snapshot reads %q, want %q", got, content)
	}
	server := sb.Detail["fuse_server_pid"]
	inSnapshot := filepath.Join(jail.FuseServerSnapshotsPath, "snapshot", dir, "planted")
	inLower := filepath.Join(jail.FuseServerLowerPath, "etc", "hostname")

	self, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	// The test binary is under the host's /tmp, which the server's own
	// tmpfs covers: it runs from the descriptor nsenter passes on.
	cmd := osexec.Command(nsenter, "-t", server, "-U", "-m", "--", "/proc/self/fd/3", inSnapshot, inLower)
	cmd.ExtraFiles = []*os.File{self}
	cmd.Env = append(os.Environ(), mountAttackEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the attack in the FUSE server's namespaces: %v\n%s", err, out)
	}
	got := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ": "); ok {
			got[k] = v
		}
	}
	if got["mount tmpfs"] != "allowed" {
		t.Fatalf("the attacker could not mount in its own namespace (%q): it does not hold the server's powers, so its refusals prove nothing\n%s", got["mount tmpfs"], out)
	}
	for _, m := range []string{jail.FuseServerLowerPath, jail.FuseServerSnapshotsPath} {
		if _, ok := got["remount-rw "+m]; !ok {
			t.Errorf("the FUSE server has %s writable, want it read-only\n%s", m, out)
		}
	}
	tries, allowed := 0, 0
	for k, v := range got {
		what, _, _ := strings.Cut(k, " ")
		switch what {
		case "remount-rw", "setattr-rw", "setattr-suid", "umount", "write":
			tries++
			if v == "allowed" {
				allowed++
				t.Errorf("the taken-over FUSE server could %s", k)
			}
		}
	}
	t.Logf("%d tries, %d allowed", tries, allowed)

	layer := filepath.Join(snap.Detail["dir"], "layer", dir, "planted")
	if b, err := os.ReadFile(layer); err != nil || string(b) != content+"\n" {
		t.Errorf("the snapshot's planted file reads %q (%v), want %q", b, err, content)
	}
	_, fresh := create(t, p, runbox.SandboxSpec{FromSnapshot: snap.Name})
	if got := run(t, fresh, "cat "+dir+"/planted"); got != content+"\n" {
		t.Errorf("a new sandbox from the snapshot reads %q, want %q", got, content)
	}
	if got := run(t, c, "cat "+dir+"/planted; echo mine > "+dir+"/own; cat "+dir+"/own"); got != content+"\nmine\n" {
		t.Errorf("the attacked sandbox reads %q, want its file and its own write", got)
	}
}
