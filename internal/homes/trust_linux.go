package homes

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox/internal/owndir"
)

// ErrUnsafeHome means a runbox home, or a directory or link on its path,
// may be changed by someone other than the caller, root and (for root)
// the home's owner: such a one could plant records, sockets and links
// there that runbox would act on. The message names the directory and
// what to do.
var ErrUnsafeHome = errors.New("runbox home is not the caller's alone")

// trustedHomes maps the absolute path of each home this process found to
// pass the rule to what it found there (homeID). The rule's own guarantee
// (no one else may change the home or its path) is what makes the answer
// last while that same directory is there, unchanged: each home is walked
// once per process, however many providers open it, and again when the
// path leads to another directory (one removed and made again, which may
// even have the same inode number) or its owner or mode changed.
var trustedHomes sync.Map // string -> homeID

// homeID is what stat says of a home: its device, inode, owner, mode and
// inode change time.
type homeID struct {
	dev, ino  uint64
	uid, mode uint32
	ctime     unix.Timespec
}

// maxLinks bounds the symbolic links followed on a home's path, as the
// kernel's own bound (40) does.
const maxLinks = 40

// Open makes the runbox home at home if it is missing (mode 0700, with any
// missing directory above it) and refuses it, with an error wrapping
// ErrUnsafeHome, unless no one but the caller, root and, when the caller
// is root, the home's owner may change it or anything on its path:
//
//   - the home must belong to one of them and give write to no one else,
//     by its mode or a POSIX ACL (sticky is refused too);
//   - every directory above it, and every symbolic link on the way, must
//     belong to one of them, and a directory may give write to others only
//     when it is sticky (/tmp) and the next entry on the path is the
//     caller's or root's: others cannot remove or rename it there (one of
//     another user's they could have made first).
//
// So whatever is in the home was put there by those principals, and no
// one else can swap the home, or a directory above it, for one of theirs
// after the check. It returns the home's absolute path.
func Open(home string) (string, error) {
	abs, err := filepath.Abs(home)
	if err != nil {
		return "", fmt.Errorf("runbox home %s: %w", home, err)
	}
	made := false
	if _, err := os.Stat(abs); errors.Is(err, fs.ErrNotExist) {
		// Checked before it is made (so nothing is made under a path
		// others control) and after (a directory made meanwhile by someone
		// else, in a sticky parent, is theirs and refused).
		if err := trusted(abs); err != nil {
			return "", err
		}
		if err := os.MkdirAll(abs, 0o700); err != nil {
			return "", fmt.Errorf("make runbox home %s: %w", abs, err)
		}
		made = true
	}
	if err := trusted(abs); err != nil {
		if made {
			return "", fmt.Errorf("%w (it was just made: someone else made %s meanwhile)", err, abs)
		}
		return "", err
	}
	return abs, nil
}

// step is a directory or link on a home's path, as lstat saw it.
type step struct {
	path   string
	uid    uint32
	mode   uint32
	isLink bool
}

// Trusted applies Open's rule to home without making anything: a home
// that does not exist passes when the path to it does.
func Trusted(home string) error {
	abs, err := filepath.Abs(home)
	if err != nil {
		return fmt.Errorf("runbox home %s: %w", home, err)
	}
	return trusted(abs)
}

// trusted applies Open's rule to abs, whose end may be missing.
func trusted(abs string) error {
	var st unix.Stat_t
	found := unix.Stat(abs, &st) == nil
	id := homeID{st.Dev, st.Ino, st.Uid, st.Mode, st.Ctim}
	if v, ok := trustedHomes.Load(abs); ok && found && v == id {
		return nil
	}
	steps, exists, err := walk(abs)
	if err != nil {
		return fmt.Errorf("runbox home %s: %w", abs, err)
	}
	if err := checkSteps(abs, steps, exists); err != nil {
		return err
	}
	if exists && found {
		// Should the path have led elsewhere between the stat and the
		// walk, the next check finds another inode and walks again.
		trustedHomes.Store(abs, id)
	}
	return nil
}

// checkSteps applies the rule to the steps walk found on abs's path.
func checkSteps(abs string, steps []step, exists bool) error {
	ours := append(owndir.Callers(), 0)
	owners := ours
	if home := steps[len(steps)-1]; exists && os.Geteuid() == 0 && !slices.Contains(ours, home.uid) {
		owners = append(slices.Clip(ours), home.uid) // root in a user's home
	}
	for i, s := range steps {
		last := exists && i == len(steps)-1
		// A sticky directory keeps what is in it from being removed or
		// renamed by others, but not from being made by them first: the
		// entry on the path in it must be the caller's or root's (not the
		// user's whose home root is in), or still missing (Open checks
		// again once it made it).
		stickyOK := !last && (i+1 == len(steps) || slices.Contains(ours, steps[i+1].uid))
		if s.isLink {
			if !slices.Contains(owners, s.uid) {
				return unsafeHome(abs, s.path, fmt.Sprintf("it is a symbolic link of uid %d's, who may point it anywhere", s.uid))
			}
			continue
		}
		if slices.Contains(owners, s.uid) && s.mode&(0o022|unix.S_ISVTX) == 0 {
			// No write for group or others in the mode, so none by an
			// ACL either: its named entries are bounded by the mask, which
			// the mode's group bits show.
			continue
		}
		why, err := refusalAt(s.path, owners, stickyOK)
		if err != nil {
			return fmt.Errorf("runbox home %s: %s: %w", abs, s.path, err)
		}
		if why != "" {
			return unsafeHome(abs, s.path, why)
		}
	}
	return nil
}

// refusalAt is owndir.Refusal of the directory at path.
func refusalAt(path string, owners []uint32, stickyOK bool) (string, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	return owndir.Refusal(f, owners, stickyOK)
}

// unsafeHome is the refusal of home because of the directory or link at.
func unsafeHome(home, at, why string) error {
	where := "it"
	if at != home {
		where = at + ", on its path,"
	}
	return fmt.Errorf("runbox home %s: %s may be changed by someone other than you and root (%s): they could plant records, sockets and links there that runbox would act on; `chmod go-w` it, or set RUNBOX_HOME to a directory of your own (docs/security.md, rule 8): %w",
		home, where, why, ErrUnsafeHome)
}

// walk returns every directory and link on abs's path, from / on, links
// followed, as lstat sees them, and whether abs itself exists (it is then
// the last step).
func walk(abs string) ([]step, bool, error) {
	var steps []step
	links := 0
	var visit func(path string) (string, bool, error)
	// visit walks path (absolute), appending its steps, and returns where
	// it led with its links resolved, and whether all of it exists.
	visit = func(path string) (string, bool, error) {
		cur := "/"
		st, err := lstat(cur)
		if err != nil {
			return "", false, err
		}
		steps = append(steps, step{path: cur, uid: st.Uid, mode: st.Mode})
		for _, name := range strings.Split(strings.TrimPrefix(filepath.Clean(path), "/"), "/") {
			if name == "" {
				continue
			}
			next := filepath.Join(cur, name)
			st, err := lstat(next)
			if errors.Is(err, unix.ENOENT) {
				return next, false, nil
			}
			if err != nil {
				return "", false, err
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFDIR:
				steps = append(steps, step{path: next, uid: st.Uid, mode: st.Mode})
				cur = next
			case unix.S_IFLNK:
				if links++; links > maxLinks {
					return "", false, fmt.Errorf("more than %d symbolic links on the path: %w", maxLinks, unix.ELOOP)
				}
				steps = append(steps, step{path: next, uid: st.Uid, isLink: true})
				target, err := os.Readlink(next)
				if err != nil {
					return "", false, err
				}
				if !filepath.IsAbs(target) {
					target = filepath.Join(cur, target)
				}
				resolved, exists, err := visit(target)
				if err != nil || !exists {
					return resolved, exists, err
				}
				cur = resolved
			default:
				return "", false, fmt.Errorf("%s is not a directory", next)
			}
		}
		return cur, true, nil
	}
	_, exists, err := visit(abs)
	if err != nil {
		return nil, false, err
	}
	return steps, exists, nil
}

// lstat is unix.Lstat returning its Stat_t.
func lstat(path string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Lstat(path, &st)
	return st, err
}
