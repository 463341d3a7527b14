package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/branching"
)

// Brancher is a Sandboxes that can pause, resume and snapshot its
// sandboxes (runbox serve: the tenant's, with its quotas; stdio: this
// machine's providers, as the CLI does).
type Brancher interface {
	// SetPaused pauses sb (or, with pause false, resumes it).
	SetPaused(ctx context.Context, sb runbox.Sandbox, pause bool) error
	// Snapshot takes a snapshot of sb named name ("" generates one).
	Snapshot(ctx context.Context, sb runbox.Sandbox, name string, opts runbox.SnapshotOptions) (runbox.Snapshot, error)
}

// maxForks bounds sandbox_fork's count.
const maxForks = 10

// SandboxRefInput names one of the session's sandboxes.
type SandboxRefInput struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"the sandbox's id or name (default: this session's)"`
}

// SandboxSnapshotInput is what sandbox_snapshot takes.
type SandboxSnapshotInput struct {
	Sandbox     string `json:"sandbox,omitempty" jsonschema:"the sandbox's id or name (default: this session's)"`
	Name        string `json:"name,omitempty" jsonschema:"the snapshot's name (default: generated)"`
	NoWorkspace bool   `json:"no_workspace,omitempty" jsonschema:"leave the workspace out"`
}

// SnapshotInfo is sandbox_snapshot's result.
type SnapshotInfo struct {
	Name      string `json:"name" jsonschema:"pass it as from_snapshot to sandbox_create"`
	Sandbox   string `json:"sandbox"`
	Workspace bool   `json:"workspace" jsonschema:"it holds a copy of the workspace"`
	Bytes     int64  `json:"bytes"`
}

// SandboxForkInput is what sandbox_fork takes.
type SandboxForkInput struct {
	Sandbox     string `json:"sandbox,omitempty" jsonschema:"the sandbox's id or name (default: this session's)"`
	Count       int    `json:"count,omitempty" jsonschema:"how many sandboxes to make (default 1, at most 10)"`
	NoWorkspace bool   `json:"no_workspace,omitempty" jsonschema:"leave the workspace out"`
	Keep        bool   `json:"keep,omitempty" jsonschema:"keep the new sandboxes when this MCP session ends"`
}

// ForkInfo is sandbox_fork's result.
type ForkInfo struct {
	Snapshot  string        `json:"snapshot"`
	Sandboxes []SandboxInfo `json:"sandboxes"`
}

// PausedInfo is sandbox_pause's and sandbox_resume's result.
type PausedInfo struct {
	Sandbox string `json:"sandbox"`
	Paused  bool   `json:"paused"`
}

var errNoBranching = fmt.Errorf("%w: this MCP server cannot pause or snapshot sandboxes", runbox.ErrUnsupported)

func (s *Server) addBranchTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "sandbox_pause",
		Title:       "Pause a sandbox",
		Description: `Freeze every process of a sandbox's commands; their timeouts stop too. A command run on a paused sandbox fails until sandbox_resume.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &hintOff, IdempotentHint: true, OpenWorldHint: &hintOff},
	}, call(s, func(ctx context.Context, st *session, _ *mcp.CallToolRequest, in SandboxRefInput) (*mcp.CallToolResult, PausedInfo, error) {
		return s.setPaused(ctx, st, in.Sandbox, true)
	}))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "sandbox_resume",
		Title:       "Resume a sandbox",
		Description: `Thaw a paused sandbox: its commands go on where they were, with the time they had left.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &hintOff, IdempotentHint: true, OpenWorldHint: &hintOff},
	}, call(s, func(ctx context.Context, st *session, _ *mcp.CallToolRequest, in SandboxRefInput) (*mcp.CallToolResult, PausedInfo, error) {
		return s.setPaused(ctx, st, in.Sandbox, false)
	}))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "sandbox_snapshot",
		Title:       "Snapshot a sandbox",
		Description: `Keep a sandbox's files as they are now (installed packages, built files, and the workspace unless no_workspace) as a snapshot; sandbox_create with from_snapshot starts new sandboxes from it.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &hintOff, OpenWorldHint: &hintOff},
	}, call(s, s.sandboxSnapshot))
	if s.cfg.Sandbox != "" {
		return // bound to one sandbox: no new ones
	}
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "sandbox_fork",
		Title:       "Fork a sandbox",
		Description: `Make count new sandboxes from a sandbox's current files, each independent of the others and of the original (try several approaches in parallel). They are removed when this MCP session ends, unless keep is set.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &hintOff, OpenWorldHint: &hintOn},
	}, call(s, s.sandboxFork))
}

func (s *Server) brancher() (Brancher, error) {
	b, ok := s.place.(Brancher)
	if !ok {
		return nil, errNoBranching
	}
	return b, nil
}

func (s *Server) setPaused(ctx context.Context, st *session, key string, pause bool) (*mcp.CallToolResult, PausedInfo, error) {
	b, err := s.brancher()
	if err != nil {
		return nil, PausedInfo{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	ref, err := st.sandbox(ctx, key)
	if err != nil {
		return nil, PausedInfo{}, err
	}
	if err := b.SetPaused(ctx, ref.sb, pause); err != nil {
		return nil, PausedInfo{}, err
	}
	word := "resumed"
	if pause {
		word = "paused"
	}
	return textResult(fmt.Sprintf("sandbox %s %s", ref.sb.ID, word)), PausedInfo{Sandbox: ref.sb.ID, Paused: pause}, nil
}

func (s *Server) sandboxSnapshot(ctx context.Context, st *session, _ *mcp.CallToolRequest, in SandboxSnapshotInput) (*mcp.CallToolResult, SnapshotInfo, error) {
	b, err := s.brancher()
	if err != nil {
		return nil, SnapshotInfo{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 4*s.cfg.CallTimeout)
	defer cancel()
	ref, err := st.sandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, SnapshotInfo{}, err
	}
	sn, err := b.Snapshot(ctx, ref.sb, in.Name, runbox.SnapshotOptions{NoWorkspace: in.NoWorkspace})
	if err != nil {
		return nil, SnapshotInfo{}, err
	}
	st.ownSnapshot(sn.Name)
	out := SnapshotInfo{Name: sn.Name, Sandbox: ref.sb.ID, Workspace: sn.Workspace, Bytes: sn.Bytes}
	return textResult(fmt.Sprintf("snapshot %s of sandbox %s (%d bytes)", sn.Name, ref.sb.ID, sn.Bytes)), out, nil
}

func (s *Server) sandboxFork(ctx context.Context, st *session, _ *mcp.CallToolRequest, in SandboxForkInput) (*mcp.CallToolResult, ForkInfo, error) {
	b, err := s.brancher()
	if err != nil {
		return nil, ForkInfo{}, err
	}
	if in.Count == 0 {
		in.Count = 1
	}
	if in.Count < 1 || in.Count > maxForks {
		return nil, ForkInfo{}, fmt.Errorf("%w: count %d: want 1 to %d", runbox.ErrInvalidSpec, in.Count, maxForks)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(2+in.Count)*2*s.cfg.CallTimeout)
	defer cancel()
	ref, err := st.sandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, ForkInfo{}, err
	}
	sn, err := b.Snapshot(ctx, ref.sb, "", runbox.SnapshotOptions{NoWorkspace: in.NoWorkspace})
	if err != nil {
		return nil, ForkInfo{}, err
	}
	st.ownSnapshot(sn.Name)
	out := ForkInfo{Snapshot: sn.Name}
	var ids []string
	for range in.Count {
		spec := runbox.SandboxSpec{FromSnapshot: sn.Name}
		if !sn.Workspace {
			spec.Workdir = s.cfg.Spec.Workdir // else the snapshot's copy
		}
		nsb, err := s.place.Create(ctx, ref.sb.Provider, spec)
		if err != nil {
			return nil, ForkInfo{}, errors.Join(err, fmt.Errorf("made %d of %d: %s", len(ids), in.Count, strings.Join(ids, " ")))
		}
		st.own(nsb, true, in.Keep)
		if _, err := st.adopt(ctx, nsb, true, in.Keep); err != nil {
			st.disown(nsb.ID)
			st.removeQuietly(nsb)
			return nil, ForkInfo{}, err
		}
		ids = append(ids, nsb.ID)
		out.Sandboxes = append(out.Sandboxes, st.info(nsb))
	}
	return textResult(fmt.Sprintf("made %d sandboxes from snapshot %s of %s: %s", len(ids), sn.Name, ref.sb.ID, strings.Join(ids, " "))), out, nil
}

// SetPaused implements Brancher as the CLI pauses (branching.SetPaused).
func (p *Providers) SetPaused(ctx context.Context, sb runbox.Sandbox, pause bool) error {
	pr, err := p.provider(sb.Provider)
	if err != nil {
		return err
	}
	return branching.SetPaused(ctx, pr, sb, pause, func() (branching.Daemon, func()) {
		cl := client.New(pr.Dialer(sb), client.WithSandboxName(sb.ID))
		return cl, func() { cl.Close() }
	})
}

// Snapshot implements Brancher with the sandbox's provider.
func (p *Providers) Snapshot(ctx context.Context, sb runbox.Sandbox, name string, opts runbox.SnapshotOptions) (runbox.Snapshot, error) {
	pr, err := p.provider(sb.Provider)
	if err != nil {
		return runbox.Snapshot{}, err
	}
	sn, err := branching.SnapshotterOf(pr)
	if err != nil {
		return runbox.Snapshot{}, err
	}
	return sn.Snapshot(ctx, sb, name, opts)
}
