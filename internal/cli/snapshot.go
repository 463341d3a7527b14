package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/branching"
)

func (a *app) snapshotCmd() *cobra.Command {
	var noWorkspace bool
	c := &cobra.Command{
		Use:   "snapshot SANDBOX [NAME] | snapshot ls | snapshot rm NAME...",
		Short: "Snapshot a sandbox's filesystem; list and remove snapshots",
		Long: `Take a snapshot of a sandbox's filesystem changes: the sandbox's commands are
held frozen (so the files are consistent), its changes are copied, and they are
thawed. The hold is not a pause: a sandbox paused before or during the copy
stays paused, one resumed during the copy runs when the copy ends. The
workspace goes with it as a copy (reflinks where the filesystem has them)
unless --no-workspace. Prints the snapshot's name (NAME, or a generated one).
"runbox up --from NAME" and "runbox fork" make sandboxes from a snapshot.

local: an immutable layer under $RUNBOX_HOME/snapshots/NAME; docker: an image
tagged runbox-snapshot/NAME (the engine's commit). Other providers cannot
snapshot (exit 125, "unsupported operation by this provider").`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return fmt.Errorf("%s: expected SANDBOX [NAME], got %d argument(s) (see '%s --help')", c.Name(), len(args), c.CommandPath())
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			key, name := args[0], ""
			if len(args) == 2 {
				name = args[1]
			}
			p, sb, err := a.find(c.Context(), key)
			if err != nil {
				return fail("snapshot", key, "", err)
			}
			sn, err := snapshotterOf(p)
			if err != nil {
				return fail("snapshot", key, "", err)
			}
			s, err := sn.Snapshot(c.Context(), sb, name, runbox.SnapshotOptions{NoWorkspace: noWorkspace})
			if err != nil {
				return fail("snapshot", key, "", err)
			}
			fmt.Fprintln(a.stdout, s.Name)
			return nil
		},
	}
	c.Flags().BoolVar(&noWorkspace, "no-workspace", false, "leave the workspace out of the snapshot")
	c.AddCommand(a.snapshotLsCmd(), a.snapshotRmCmd())
	return c
}

// snapshotterOf is p as a runbox.Snapshotter, or ErrUnsupported.
var snapshotterOf = branching.SnapshotterOf

// snapshotJSON is a snapshot as ls --json prints it.
type snapshotJSON struct {
	Name      string            `json:"name"`
	Provider  string            `json:"provider"`
	Sandbox   string            `json:"sandbox"`
	Created   time.Time         `json:"created"`
	Workspace bool              `json:"workspace"`
	Bytes     int64             `json:"bytes"`
	Detail    map[string]string `json:"detail,omitempty"`
}

func (a *app) snapshotLsCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ls [--json]",
		Short: "List snapshots",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, _ []string) error {
			var all []runbox.Snapshot
			for _, p := range a.allProviders() {
				sn, ok := p.(runbox.Snapshotter)
				if !ok {
					continue
				}
				ss, err := sn.Snapshots(c.Context())
				if err != nil {
					fmt.Fprintln(a.stderr, "runbox: "+oneLine(fail("list snapshots", "", "", fmt.Errorf("%s: %w", p.Name(), err)).Error()))
					continue
				}
				all = append(all, ss...)
			}
			if asJSON {
				out := make([]snapshotJSON, len(all))
				for i, s := range all {
					out[i] = snapshotJSON(s)
				}
				return json.NewEncoder(a.stdout).Encode(out)
			}
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tPROVIDER\tSANDBOX\tWORKSPACE\tSIZE\tCREATED")
			for _, s := range all {
				fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%s\t%s\n", s.Name, s.Provider, s.Sandbox, s.Workspace, strconv.FormatInt(s.Bytes, 10), s.Created.Local().Format(time.RFC3339))
			}
			return w.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return c
}

func (a *app) snapshotRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME...",
		Short: "Remove snapshots (sandboxes made from them keep working)",
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("%s: expected at least one NAME (see '%s --help')", c.Name(), c.CommandPath())
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			failed := false
			for _, name := range args {
				if err := a.removeSnapshot(c.Context(), name); err != nil {
					fmt.Fprintln(a.stderr, "runbox: "+oneLine(fail("remove snapshot", "", "", err).Error()))
					failed = true
					continue
				}
				fmt.Fprintln(a.stdout, name)
			}
			if failed {
				return &ExitError{Code: ExitStatusFailure}
			}
			return nil
		},
	}
}

// removeSnapshot removes the snapshot name from the provider that has it.
func (a *app) removeSnapshot(ctx context.Context, name string) error {
	for _, p := range a.allProviders() {
		sn, ok := p.(runbox.Snapshotter)
		if !ok {
			continue
		}
		ss, err := sn.Snapshots(ctx)
		if err != nil {
			continue
		}
		for _, s := range ss {
			if s.Name == name {
				return sn.RemoveSnapshot(ctx, name)
			}
		}
	}
	return fmt.Errorf("no snapshot %s (runbox snapshot ls): %w", name, runbox.ErrInvalidSpec)
}

func (a *app) forkCmd() *cobra.Command {
	var count int
	var noWorkspace bool
	c := &cobra.Command{
		Use:   "fork SANDBOX [--count N] [--no-workspace]",
		Short: "Make N independent sandboxes from a sandbox's current state",
		Long: `Snapshot the sandbox (runbox snapshot) and make --count new sandboxes from the
snapshot (runbox up --from), each with its own writable layer and its own copy
of the workspace: a write in one is seen by none of the others, nor by the
sandbox forked. Prints the new sandboxes' ids, one a line; the snapshot stays
(runbox snapshot ls) until removed. The forks get the provider's default
limits.`,
		Args: exactArgs(1, "SANDBOX"),
		RunE: func(c *cobra.Command, args []string) error {
			key := args[0]
			if count < 1 {
				return fail("fork", key, "", fmt.Errorf("--count %d: want at least 1: %w", count, runbox.ErrInvalidSpec))
			}
			p, sb, err := a.find(c.Context(), key)
			if err != nil {
				return fail("fork", key, "", err)
			}
			sn, err := snapshotterOf(p)
			if err != nil {
				return fail("fork", key, "", err)
			}
			s, err := sn.Snapshot(c.Context(), sb, "fork-"+sb.ID+"-"+strconv.FormatInt(time.Now().UnixMilli(), 36), runbox.SnapshotOptions{NoWorkspace: noWorkspace})
			if err != nil {
				return fail("fork", key, "", err)
			}
			ids, errs := createForks(c.Context(), p, s.Name, count)
			for _, id := range ids {
				if id != "" {
					fmt.Fprintln(a.stdout, id)
				}
			}
			if err := errors.Join(errs...); err != nil {
				return fail("fork", key, "", err)
			}
			return nil
		},
	}
	c.Flags().IntVar(&count, "count", 1, "how many sandboxes to make")
	c.Flags().BoolVar(&noWorkspace, "no-workspace", false, "leave the workspace out (the forks get none copied)")
	return c
}

// forkParallel is how many of a fork's sandboxes are made at once: each
// waits mostly on its runboxd's start (and docker on the engine), so a few
// at a time cost little more than one.
const forkParallel = 8

// createForks makes count sandboxes from the snapshot name, forkParallel
// at a time, and returns their ids in order ("" where one failed) and the
// errors.
func createForks(ctx context.Context, p runbox.Provider, name string, count int) ([]string, []error) {
	ids := make([]string, count)
	errs := make([]error, count)
	sem := make(chan struct{}, forkParallel)
	var wg sync.WaitGroup
	for i := range count {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			sb, err := p.Create(ctx, runbox.SandboxSpec{FromSnapshot: name})
			ids[i], errs[i] = sb.ID, err
		}()
	}
	wg.Wait()
	return ids, errs
}
