// Package procbox keeps sandboxes whose runboxd is a process on this
// machine (the host and local providers): their records on disk under the
// runbox home, creating, finding, probing and removing them. What differs
// between the providers (what a spec may ask for, how runboxd is started,
// what is left to clean up) comes in a Kind.
//
// State lives on disk so separate processes (`runbox up`, `runbox exec`,
// `runbox rm`) share it:
//
//	$HOME/sandboxes/<id>/sandbox.json   the record: id, provider, name, pid, start time, socket
//	$HOME/sandboxes/<id>/runboxd.sock   runboxd's API socket
//	$HOME/sandboxes/<id>/runboxd.log    runboxd's stdout and stderr
//	$HOME/sandboxes/<id>/secret         the sandbox's secret (0600): every connection to
//	                                    runboxd starts with it; runboxd holds only its SHA-256
//	$HOME/sandboxes/<id>/daemon.json    (host) runboxd's marker and cgroup, written before it
//	                                    serves; moved into the record once it answers
//
// A record stores runboxd's pid together with the process start time from
// /proc/<pid>/stat, so a recycled pid is never mistaken for the sandbox's
// daemon (and never signalled).
package procbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/internal/homes"
	"github.com/runbox/runbox/internal/owndir"
	"github.com/runbox/runbox/internal/processrecord"
	"github.com/runbox/runbox/internal/recordfile"
	"github.com/runbox/runbox/internal/runboxdbin"
	"github.com/runbox/runbox/internal/sandboxkey"
)

// Timing knobs. None of them decides a command's fate: runboxd enforces exec
// deadlines itself; these only bound how long the provider waits on runboxd.
const (
	// startTimeout bounds how long Create waits for a new runboxd to answer.
	// A healthy daemon answers within milliseconds; a slow CI machine under
	// -race can take a second or two.
	startTimeout = 15 * time.Second
	// aliveTimeout bounds the Info probe that decides Sandbox.Alive, so one
	// wedged daemon cannot make List hang.
	aliveTimeout = processrecord.AliveTimeout
	// shutdownTimeout bounds the Shutdown RPC when the caller's context has no
	// deadline. The RPC takes as long as the slowest exec's grace period.
	shutdownTimeout = 2 * time.Minute
	// exitTimeout is how long Remove waits for runboxd to exit after Shutdown
	// returned (or failed) before it sends SIGKILL.
	exitTimeout = 10 * time.Second
	// pollInterval is how often Create and Remove look at the process.
	pollInterval = 10 * time.Millisecond
)

// maxSocketPath is the longest unix socket path Linux accepts: sun_path is
// 108 bytes including the terminating NUL.
const maxSocketPath = 107

// ErrNameInUse means another sandbox already has the requested name.
var ErrNameInUse = runbox.ErrNameInUse

// ErrSharedWorkdir is runbox.ErrUnsafeWorkdir: a workdir is a directory
// someone other than the caller may put things into (see
// internal/owndir). Errors wrapping it wrap runbox.ErrInvalidSpec as well.
var ErrSharedWorkdir = runbox.ErrUnsafeWorkdir

// Kind is what one provider adds to the shared machinery.
type Kind struct {
	// Name is the provider's name, recorded in every record it creates;
	// a Store sees only its own kind's sandboxes.
	Name string
	// Check refuses what the provider cannot do. The name is checked by
	// the Store.
	Check func(spec runbox.SandboxSpec) error
	// EndsWithDaemon says nothing of a sandbox runs once its runboxd is
	// gone (it was the sandbox's PID 1), so removing a lost sandbox needs
	// no force.
	EndsWithDaemon bool
	// Launch starts runboxd for the sandbox in l and returns it once it
	// runs; the Store then records its pid and waits for it to answer.
	Launch func(ctx context.Context, l Launch) (*Detached, error)
	// Cleanup, if set, runs once runboxd is gone, before the sandbox's
	// directory is removed. It must be safe to run more than once.
	Cleanup func(rec Record, sbDir string) error
	// Describe, if set, adds the provider's facts to a sandbox's Detail.
	Describe func(rec Record, detail map[string]string)
	// PrivateWorkdir refuses a workdir that is not the caller's alone
	// (ErrSharedWorkdir, owndir.Check): whatever others leave there,
	// their unix sockets above all, would be in the sandbox. Launch then
	// gets the checked directory's handle (Launch.WorkdirHandle) and must
	// bind that, not the path.
	PrivateWorkdir bool
}

// Launch is what Kind.Launch is given.
type Launch struct {
	// Dir is the sandbox's directory (its state; the socket is in it).
	Dir string
	// Home is the runbox home holding every sandbox's directory.
	Home string
	// Record is the sandbox's record: ID, Socket, Workdir and Runboxd are
	// set. Launch may fill Extra, which is saved with the pid.
	Record *Record
	// Spec is the spec the sandbox was created from.
	Spec runbox.SandboxSpec
	// Log is where runboxd's stdout and stderr go.
	Log *os.File
	// AuthSHA256 is the SHA-256 (hex) of the sandbox's secret, which
	// runboxd must be given (never the secret itself) so that it serves
	// only connections that start with the secret.
	AuthSHA256 string
	// DaemonFile is where runboxd serve may be told to write where its
	// commands live (--daemon-file): once runboxd answers, the Store moves
	// it into the record, so Remove can kill what its execs left should
	// runboxd die without stopping them.
	DaemonFile string
	// WorkdirHandle is the workdir as Create opened and checked it (an
	// O_PATH handle, held until Launch returns): a provider binds this
	// directory, or refuses one that is not it, so a swap of the path
	// after the check cannot put another directory in the sandbox.
	WorkdirHandle *os.File
}

// Store creates and finds the sandboxes of one Kind under a runbox home.
type Store struct {
	Kind
	// Home is the runbox home directory holding sandbox records; "" means
	// $RUNBOX_HOME, else ~/.runbox. Unix socket paths are limited to 107
	// bytes, so keep it short.
	Home string
	// Runboxd is the path of the runboxd binary; "" means $RUNBOX_RUNBOXD,
	// else a runboxd beside the running executable, else runboxd in PATH.
	Runboxd string
}

// DefaultHome returns $RUNBOX_HOME, or ~/.runbox when it is unset.
func DefaultHome() (string, error) { return processrecord.Home() }

// Record is a sandbox as stored in sandbox.json (processrecord.Record).
type Record = processrecord.Record

// OpenHome returns the runbox home home ("" means DefaultHome), absolute,
// made if missing, and refused unless only the caller and root may
// change it (homes.Open): every provider opens its home through it.
func OpenHome(home string) (string, error) {
	if home == "" {
		var err error
		if home, err = DefaultHome(); err != nil {
			return "", err
		}
	}
	return homes.Open(home)
}

func (p *Store) home() (string, error) { return OpenHome(p.Home) }

// HomeDir is the runbox home the store keeps its sandboxes under.
func (p *Store) HomeDir() (string, error) { return p.home() }

func (p *Store) sandboxesDir() (string, error) {
	h, err := p.home()
	if err != nil {
		return "", err
	}
	return processrecord.SandboxesDir(h)
}

// validName is what a sandbox name may look like (docker's rule), so names
// are safe in paths, shells and error messages.
var validName = sandboxkey.ValidName

// Create starts a new runboxd and returns once it answers. The sandbox's
// workdir is spec.Workdir, else the caller's working directory; the Kind
// decides what else a spec may ask for.
func (p *Store) Create(ctx context.Context, spec runbox.SandboxSpec) (runbox.Sandbox, error) {
	fail := func(id string, err error) (runbox.Sandbox, error) {
		if id == "" {
			id = spec.Name
		}
		return runbox.Sandbox{}, &runbox.Error{Op: "create", Sandbox: id, Err: err}
	}
	if spec.Name != "" && !validName(spec.Name) {
		return fail("", fmt.Errorf("invalid name %q: use letters, digits, '_', '.', '-' (at most 63, not starting with a punctuation mark)", spec.Name))
	}
	if p.Check != nil {
		if err := p.Check(spec); err != nil {
			return fail("", err)
		}
	}
	dir, err := p.sandboxesDir()
	if err != nil {
		return fail("", err)
	}
	// Check the socket path length before anything is created: ids have a
	// fixed length, so every sandbox under this home has the same length.
	if sock := filepath.Join(dir, strings.Repeat("x", 12), "runboxd.sock"); len(sock) > maxSocketPath {
		return fail("", fmt.Errorf("socket path %s would be %d bytes, more than the %d a unix socket allows: use a shorter RUNBOX_HOME (now %s)",
			sock, len(sock), maxSocketPath, filepath.Dir(dir)))
	}
	bin, err := p.locateRunboxd()
	if err != nil {
		return fail("", err)
	}
	workdir := spec.Workdir
	if workdir == "" {
		if workdir, err = physicalWd(); err != nil {
			return fail("", fmt.Errorf("working directory: %w", err))
		}
	}
	if workdir, err = filepath.Abs(workdir); err != nil {
		return fail("", fmt.Errorf("workdir: %w", err))
	}
	if home := filepath.Dir(dir); Within(home, workdir) {
		return fail("", fmt.Errorf("workdir %s is inside the runbox home %s, which holds every sandbox's records, sockets and secrets: a sandbox must not see it; pick another directory, or move the home with RUNBOX_HOME: %w",
			workdir, home, runbox.ErrInvalidSpec))
	}
	if err := homes.Check(workdir, filepath.Dir(dir)); err != nil {
		return fail("", err)
	}
	wd, err := owndir.Open(workdir)
	if err != nil {
		return fail("", err)
	}
	defer wd.Close()
	if p.PrivateWorkdir {
		if err := owndir.Check(wd, workdir); err != nil {
			return fail("", err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail("", fmt.Errorf("runbox home: %w", err))
	}
	// Known machine-wide from now on, so no other sandbox's workdir may
	// hold it (homes.Check).
	if err := homes.Register(filepath.Dir(dir)); err != nil {
		return fail("", err)
	}

	rec, err := p.reserve(dir, spec.Name, workdir, bin)
	if err != nil {
		return fail("", err)
	}
	sbDir := filepath.Join(dir, rec.ID)
	if err := p.start(ctx, sbDir, &rec, spec, wd); err != nil {
		if p.Cleanup != nil {
			_ = p.Cleanup(rec, sbDir)
		}
		os.RemoveAll(sbDir)
		return fail(rec.ID, err)
	}
	return p.toSandbox(rec, sbDir, true), nil
}

// Within reports whether path p is dir or lies inside it (both absolute),
// through symbolic links as the kernel resolves them where they exist.
func Within(dir, p string) bool {
	for _, pair := range [][2]string{{dir, p}, {evalOrSelf(dir), evalOrSelf(p)}} {
		rel, err := filepath.Rel(pair[0], pair[1])
		if err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return true
		}
	}
	return false
}

// evalOrSelf resolves p's symbolic links, or returns p when it cannot.
func evalOrSelf(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// reserve picks a fresh id and writes a preliminary record (pid 0) under the
// home's lock, so two concurrent Creates never take the same name or id.
func (p *Store) reserve(dir, name, workdir, bin string) (Record, error) {
	unlock, err := recordfile.LockDir(dir)
	if err != nil {
		return Record{}, fmt.Errorf("runbox home: %w", err)
	}
	defer unlock()
	if name != "" {
		recs, err := readRecords(dir)
		if err != nil {
			return Record{}, err
		}
		for _, r := range recs {
			if r.Name == name {
				return Record{}, fmt.Errorf("name %q is used by sandbox %s: %w", name, r.ID, ErrNameInUse)
			}
		}
	}
	for range 10 {
		id, err := sandboxkey.NewID()
		if err != nil {
			return Record{}, err
		}
		sbDir := filepath.Join(dir, id)
		if err := os.Mkdir(sbDir, 0o700); errors.Is(err, fs.ErrExist) {
			continue
		} else if err != nil {
			return Record{}, fmt.Errorf("sandbox dir: %w", err)
		}
		if err := writeSecret(sbDir); err != nil {
			os.RemoveAll(sbDir)
			return Record{}, err
		}
		rec := Record{
			ID:       id,
			Name:     name,
			Provider: p.Name,
			Created:  time.Now().UTC(),
			Socket:   filepath.Join(sbDir, "runboxd.sock"),
			Workdir:  workdir,
			Runboxd:  bin,
		}
		if err := writeRecord(sbDir, rec); err != nil {
			os.RemoveAll(sbDir)
			return Record{}, err
		}
		return rec, nil
	}
	return Record{}, errors.New("cannot pick a fresh sandbox id")
}

// start launches runboxd for rec, records its pid, and waits until it
// answers Info. On failure runboxd is killed and the error carries the tail
// of its log.
func (p *Store) start(ctx context.Context, sbDir string, rec *Record, spec runbox.SandboxSpec, wd *os.File) error {
	logPath := filepath.Join(sbDir, "runboxd.log")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("runboxd log: %w", err)
	}
	home := filepath.Dir(filepath.Dir(sbDir)) // <home>/sandboxes/<id>
	secret, err := readSecret(sbDir)
	if err != nil {
		logf.Close()
		return err
	}
	daemonFile := filepath.Join(sbDir, daemonFileName)
	proc, err := p.Launch(ctx, Launch{Dir: sbDir, Home: home, Record: rec, Spec: spec, Log: logf,
		AuthSHA256: daemonauth.Sum(secret), DaemonFile: daemonFile, WorkdirHandle: wd})
	logf.Close() // runboxd holds its own copy
	if err != nil {
		return fmt.Errorf("start runboxd %s: %w%s", rec.Runboxd, err, logTail(logPath))
	}
	rec.Pid = proc.Pid
	if rec.StartTime, err = procStartTime(proc.Pid); err != nil {
		// It died already (and may be reaped); the wait below reports why.
		rec.StartTime = 0
	}
	rec.BootID = processrecord.BootID()
	if err := writeRecord(sbDir, *rec); err != nil {
		proc.Kill()
		return err
	}

	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := waitReady(ctx, rec.Socket, dialer(rec.Socket, sbDir), proc.Exited); err != nil {
		proc.Kill()
		<-proc.Exited
		return fmt.Errorf("runboxd did not start: %w%s", err, logTail(logPath))
	}
	if err := recordDaemonFile(daemonFile, sbDir, rec); err != nil {
		proc.Kill()
		<-proc.Exited
		return err
	}
	return nil
}

// logTail returns the last lines of runboxd's log, formatted to follow an
// error message, or "" when the log is empty.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	const max = 2048
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return "; runboxd log (" + path + "): " + strings.TrimSpace(string(b))
}

// locateRunboxd finds the runboxd binary: Provider.Runboxd, $RUNBOX_RUNBOXD,
// beside the running executable, then PATH.
func (p *Store) locateRunboxd() (string, error) { return runboxdbin.Locate(p.Runboxd) }

// Get finds a sandbox by exact id, exact name, or unique id prefix, and
// probes whether its runboxd answers.
func (p *Store) Get(ctx context.Context, idOrName string) (runbox.Sandbox, error) {
	dir, err := p.sandboxesDir()
	if err != nil {
		return runbox.Sandbox{}, &runbox.Error{Op: "get", Sandbox: idOrName, Err: err}
	}
	recs, err := p.records(dir)
	if err != nil {
		return runbox.Sandbox{}, &runbox.Error{Op: "get", Sandbox: idOrName, Err: err}
	}
	rec, err := match(recs, idOrName)
	if err != nil {
		return runbox.Sandbox{}, &runbox.Error{Op: "get", Sandbox: idOrName, Err: err}
	}
	sbDir := filepath.Join(dir, rec.ID)
	return p.toSandbox(rec, sbDir, isAlive(ctx, rec, sbDir)), nil
}

// GetByID finds the sandbox whose id is exactly id, reading its record
// alone (Get reads every record to rank names and prefixes), and probes
// its runboxd as Get does. It returns the probe's connection, already
// authenticated, when the sandbox is Alive (nil otherwise), so a caller
// about to talk to the sandbox need not open another: it owns the
// connection and must close it. A sandbox of another kind, or none, with
// that id is ErrSandboxNotFound.
func (p *Store) GetByID(ctx context.Context, id string) (runbox.Sandbox, net.Conn, error) {
	fail := func(err error) error { return &runbox.Error{Op: "get", Sandbox: id, Err: err} }
	dir, err := p.sandboxesDir()
	if err != nil {
		return runbox.Sandbox{}, nil, fail(err)
	}
	if !sandboxkey.ValidID(id) {
		return runbox.Sandbox{}, nil, fail(runbox.ErrSandboxNotFound)
	}
	sbDir := filepath.Join(dir, id)
	rec, err := readRecord(sbDir)
	switch {
	case errors.Is(err, fs.ErrNotExist) || err == nil && (rec.ID != id || rec.Provider != p.Name):
		return runbox.Sandbox{}, nil, fail(runbox.ErrSandboxNotFound)
	case err != nil:
		return runbox.Sandbox{}, nil, fail(err)
	}
	conn := aliveConn(ctx, rec, sbDir)
	return p.toSandbox(rec, sbDir, conn != nil), conn, nil
}

// match picks the record named by key (see sandboxkey.Match).
func match(recs []Record, key string) (Record, error) {
	return sandboxkey.Match(recs, key, func(r Record) string { return r.ID }, func(r Record) string { return r.Name })
}

// List returns every sandbox of the store's kind under the home, oldest first, each marked
// Alive when its runboxd accepts a connection with the sandbox's secret within a second.
func (p *Store) List(ctx context.Context) ([]runbox.Sandbox, error) {
	dir, err := p.sandboxesDir()
	if err != nil {
		return nil, &runbox.Error{Op: "list", Err: err}
	}
	recs, err := p.records(dir)
	if err != nil {
		return nil, &runbox.Error{Op: "list", Err: err}
	}
	out := make([]runbox.Sandbox, 0, len(recs))
	for _, r := range recs {
		out = append(out, p.toSandbox(r, filepath.Join(dir, r.ID), isAlive(ctx, r, filepath.Join(dir, r.ID))))
	}
	return out, nil
}

// Remove stops every exec with the stop protocol (the Shutdown RPC), waits
// for runboxd to exit, SIGKILLs it if it has not within a bound, and deletes
// the sandbox's directory. A sandbox whose runboxd is already gone is only
// removed with force (or when the Kind's sandboxes end with their daemon),
// and the error without force wraps ErrSandboxLost. Once runboxd is gone,
// Remove kills every process its execs left behind, found by the cgroup
// and RUNBOX_DAEMON marker recorded when it started (see killLeftovers),
// and keeps the record when one survives.
func (p *Store) Remove(ctx context.Context, sb runbox.Sandbox, force bool) error {
	fail := func(err error) error { return &runbox.Error{Op: "remove", Sandbox: sb.ID, Err: err} }
	dir, err := p.sandboxesDir()
	if err != nil {
		return fail(err)
	}
	if sb.ID == "" || sb.ID != filepath.Base(sb.ID) {
		return fail(runbox.ErrSandboxNotFound)
	}
	sbDir := filepath.Join(dir, sb.ID)
	rec, err := readRecord(sbDir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && rec.Provider != p.Name) {
		return fail(runbox.ErrSandboxNotFound)
	} else if err != nil {
		return fail(err)
	}
	if procAlive(rec) {
		if err := stop(ctx, rec, sbDir); err != nil {
			return fail(err)
		}
	} else if !force && !p.EndsWithDaemon {
		return fail(fmt.Errorf("%w: runboxd (pid %d) is not running; remove it with force", runbox.ErrSandboxLost, rec.Pid))
	}
	// runboxd is gone now. If it died without stopping its execs (SIGKILL,
	// the OOM killer, a crash, or stop's own SIGKILL), what they left
	// still runs: kill it before the record that finds it goes.
	if _, err := killLeftovers(ctx, rec); err != nil {
		return fail(err)
	}
	if p.Cleanup != nil {
		if err := p.Cleanup(rec, sbDir); err != nil {
			return fail(err)
		}
	}
	if err := os.RemoveAll(sbDir); err != nil {
		return fail(fmt.Errorf("remove %s: %w", sbDir, err))
	}
	return nil
}

// procAlive reports whether the recorded runboxd process is still running
// (processrecord.Alive).
func procAlive(rec Record) bool { return processrecord.Alive(rec) }

// killRecord sends SIGKILL to the recorded runboxd, if it is still that
// process.
func killRecord(rec Record) error {
	if !procAlive(rec) {
		return nil
	}
	return killPid(rec.Pid)
}

func (p *Store) toSandbox(rec Record, sbDir string, alive bool) runbox.Sandbox {
	sb := runbox.Sandbox{
		ID:       rec.ID,
		Name:     rec.Name,
		Provider: rec.Provider,
		Created:  rec.Created,
		Alive:    alive,
		Detail: map[string]string{
			"pid":     strconv.Itoa(rec.Pid),
			"socket":  rec.Socket,
			"dir":     sbDir,
			"log":     filepath.Join(sbDir, "runboxd.log"),
			"workdir": rec.Workdir,
			"runboxd": rec.Runboxd,
		},
	}
	if !alive {
		sb.Detail["lost"] = fmt.Sprintf("runboxd (pid %d) is not running", rec.Pid)
		if procAlive(rec) {
			sb.Detail["lost"] = fmt.Sprintf("runboxd (pid %d) runs but does not answer on %s", rec.Pid, rec.Socket)
		}
	}
	if p.Describe != nil {
		p.Describe(rec, sb.Detail)
	}
	return sb
}
