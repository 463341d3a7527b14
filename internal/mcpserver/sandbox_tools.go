package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/runbox/runbox"
)

func (s *Server) addSandboxTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "sandbox_create",
		Title: "Make a sandbox",
		Description: `Make a new sandbox and return its id; pass it as sandbox to the other tools, or set use to make it this session's default.
It is removed when this MCP session ends, unless keep is set.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &hintOff, OpenWorldHint: &hintOn},
	}, call(s, s.sandboxCreate))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "sandbox_list",
		Title:       "List sandboxes",
		Description: `List the sandboxes there are, saying which one is this session's default and which this session made.`,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &hintOff},
	}, call(s, s.sandboxList))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "sandbox_remove",
		Title:       "Remove a sandbox",
		Description: `Stop every command in a sandbox and destroy it with its files. Removing this session's default sandbox makes the next call without a sandbox get a fresh one.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &hintOn, IdempotentHint: true, OpenWorldHint: &hintOff},
	}, call(s, s.sandboxRemove))
}

// SandboxCreateInput is what sandbox_create takes.
type SandboxCreateInput struct {
	Provider string  `json:"provider,omitempty" jsonschema:"where the sandbox runs: local, host, docker (default: the server's)"`
	Image    string  `json:"image,omitempty" jsonschema:"the image, for providers that use one (docker)"`
	Name     string  `json:"name,omitempty" jsonschema:"a unique name to refer to the sandbox by"`
	MemoryMB int64   `json:"memory_mb,omitempty" jsonschema:"memory limit in MiB (default: none)"`
	Pids     int64   `json:"pids,omitempty" jsonschema:"process count limit (default: none)"`
	CPUs     float64 `json:"cpus,omitempty" jsonschema:"CPU limit, e.g. 1.5 (default: none)"`
	Network  string  `json:"network,omitempty" jsonschema:"none (loopback only) or host (default: the provider's)"`
	Keep     bool    `json:"keep,omitempty" jsonschema:"keep the sandbox when this MCP session ends"`
	Use      bool    `json:"use,omitempty" jsonschema:"make it this session's default sandbox"`
}

// SandboxInfo describes a sandbox.
type SandboxInfo struct {
	ID       string `json:"id"`
	Name     string `json:"name,omitempty"`
	Provider string `json:"provider"`
	Alive    bool   `json:"alive" jsonschema:"its runboxd answers (false: the sandbox is lost)"`
	Created  string `json:"created" jsonschema:"RFC 3339"`
	Default  bool   `json:"default" jsonschema:"this session's default sandbox"`
	Made     bool   `json:"made_by_session" jsonschema:"made by this MCP session"`
	Keep     bool   `json:"keep" jsonschema:"made by this session and kept when it ends"`
}

func (st *session) info(sb runbox.Sandbox) SandboxInfo {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := SandboxInfo{ID: sb.ID, Name: sb.Name, Provider: sb.Provider, Alive: sb.Alive,
		Created: sb.Created.UTC().Format(time.RFC3339), Default: sb.ID == st.def}
	if ref, ok := st.sandboxes[sb.ID]; ok {
		out.Made, out.Keep = ref.made, ref.made && ref.keep
	}
	return out
}

func (s *Server) sandboxCreate(ctx context.Context, st *session, _ *mcp.CallToolRequest, in SandboxCreateInput) (*mcp.CallToolResult, SandboxInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*s.cfg.CallTimeout)
	defer cancel()
	switch {
	case in.MemoryMB < 0 || in.Pids < 0 || in.CPUs < 0:
		return nil, SandboxInfo{}, fmt.Errorf("%w: memory_mb, pids and cpus must not be negative", runbox.ErrInvalidSpec)
	case in.Network != "" && in.Network != "none" && in.Network != "host":
		return nil, SandboxInfo{}, fmt.Errorf("%w: network %q: want none or host", runbox.ErrInvalidSpec, in.Network)
	}
	// The workspace and root filesystem are the server's to choose, never
	// the model's: a model must not mount a host directory of its choice.
	spec := runbox.SandboxSpec{Workdir: s.cfg.Spec.Workdir, Image: s.cfg.Spec.Image,
		Name: in.Name, Memory: in.MemoryMB << 20, Pids: in.Pids, CPUs: in.CPUs, Network: in.Network}
	if in.Image != "" {
		spec.Image = in.Image
	}
	provider := in.Provider
	if provider == "" {
		provider = s.cfg.Provider
	}
	sb, err := s.place.Create(ctx, provider, spec)
	if err != nil {
		return nil, SandboxInfo{}, err
	}
	if _, err := st.adopt(ctx, sb, true, in.Keep); err != nil {
		st.removeQuietly(sb)
		return nil, SandboxInfo{}, err
	}
	if in.Use {
		st.mu.Lock()
		st.def = sb.ID
		st.mu.Unlock()
	}
	out := st.info(sb)
	return textResult(fmt.Sprintf("made sandbox %s (%s)%s", sb.ID, sb.Provider, describe(out))), out, nil
}

// describe renders a sandbox's flags.
func describe(i SandboxInfo) string {
	var flags []string
	if i.Name != "" {
		flags = append(flags, "name "+i.Name)
	}
	if i.Default {
		flags = append(flags, "this session's default")
	}
	if i.Made {
		flags = append(flags, "made by this session")
	}
	if i.Keep {
		flags = append(flags, "kept after the session")
	} else if i.Made {
		flags = append(flags, "removed when the session ends")
	}
	if !i.Alive {
		flags = append(flags, "LOST")
	}
	if len(flags) == 0 {
		return ""
	}
	return ": " + strings.Join(flags, ", ")
}

// SandboxListInput is what sandbox_list takes (nothing).
type SandboxListInput struct{}

// SandboxList is what sandbox_list returns.
type SandboxList struct {
	Sandboxes []SandboxInfo `json:"sandboxes"`
}

func (s *Server) sandboxList(ctx context.Context, st *session, _ *mcp.CallToolRequest, _ SandboxListInput) (*mcp.CallToolResult, SandboxList, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	sbs, err := s.place.List(ctx)
	if err != nil {
		return nil, SandboxList{}, err
	}
	out := SandboxList{Sandboxes: make([]SandboxInfo, 0, len(sbs))}
	var b strings.Builder
	fmt.Fprintf(&b, "%d sandboxes\n", len(sbs))
	for _, sb := range sbs {
		i := st.info(sb)
		out.Sandboxes = append(out.Sandboxes, i)
		fmt.Fprintf(&b, "%s (%s)%s\n", i.ID, i.Provider, describe(i))
	}
	return textResult(b.String()), out, nil
}

// SandboxRemoveInput is what sandbox_remove takes.
type SandboxRemoveInput struct {
	Sandbox string `json:"sandbox" jsonschema:"sandbox id or name"`
	Force   bool   `json:"force,omitempty" jsonschema:"also remove a lost sandbox (its runboxd is gone)"`
}

// SandboxRemoveResult is what sandbox_remove returns.
type SandboxRemoveResult struct {
	ID      string `json:"id"`
	Removed bool   `json:"removed"`
}

func (s *Server) sandboxRemove(ctx context.Context, st *session, _ *mcp.CallToolRequest, in SandboxRemoveInput) (*mcp.CallToolResult, SandboxRemoveResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*s.cfg.CallTimeout)
	defer cancel()
	if in.Sandbox == "" {
		return nil, SandboxRemoveResult{}, fmt.Errorf("%w: name the sandbox to remove", runbox.ErrInvalidSpec)
	}
	sb, err := s.place.Get(ctx, in.Sandbox)
	if err != nil {
		return nil, SandboxRemoveResult{}, err
	}
	if err := s.place.Remove(ctx, sb, in.Force); err != nil {
		return nil, SandboxRemoveResult{}, err
	}
	st.forget(sb.ID)
	out := SandboxRemoveResult{ID: sb.ID, Removed: true}
	return textResult("removed sandbox " + sb.ID), out, nil
}
