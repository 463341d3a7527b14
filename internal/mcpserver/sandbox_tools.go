package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/runbox/runbox"
)

func (s *Server) addSandboxTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "sandbox_list",
		Title:       "List sandboxes",
		Description: `List this session's sandboxes, saying which one is its default.`,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &hintOff},
	}, call(s, s.sandboxList))
	if s.cfg.Sandbox != "" {
		// Bound to one sandbox: nothing to make or remove.
		return
	}
	s.mcp.AddReceivingMiddleware(s.offeredProviders)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "sandbox_create",
		Title: "Make a sandbox",
		Description: `Make a new sandbox and return its id; pass it as sandbox to the other tools, or set use to make it this session's default.
It is removed when this MCP session ends, unless keep is set.`,
		InputSchema: s.createSchema(),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &hintOff, OpenWorldHint: &hintOn},
	}, call(s, s.sandboxCreate))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "sandbox_remove",
		Title:       "Remove a sandbox",
		Description: `Stop every command in one of this session's sandboxes and destroy it with its files. Removing this session's default sandbox makes the next call without a sandbox get a fresh one.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &hintOn, IdempotentHint: true, OpenWorldHint: &hintOff},
	}, call(s, s.sandboxRemove))
}

// createSchema is sandbox_create's input schema: provider lists the
// providers on offer, and is left out when there is only one to take.
func (s *Server) createSchema() *jsonschema.Schema {
	schema, err := jsonschema.For[SandboxCreateInput](nil)
	if err != nil {
		panic(fmt.Sprintf("sandbox_create's input schema: %v", err))
	}
	if ps := s.cfg.providers(); len(ps) == 1 {
		delete(schema.Properties, "provider")
	} else {
		p := schema.Properties["provider"]
		def := ps[0]
		if def == "" {
			def = "the server's"
		}
		p.Description = "where the sandbox runs (default: " + def + ")"
		for _, name := range ps {
			if name != "" {
				p.Enum = append(p.Enum, name)
			}
		}
	}
	return schema
}

// SandboxCreateInput is what sandbox_create takes.
type SandboxCreateInput struct {
	Provider string   `json:"provider,omitempty" jsonschema:"where the sandbox runs"`
	Image    string   `json:"image,omitempty" jsonschema:"the image, for providers that use one (docker)"`
	Name     string   `json:"name,omitempty" jsonschema:"a unique name to refer to the sandbox by"`
	MemoryMB *int64   `json:"memory_mb,omitempty" jsonschema:"memory limit in MiB (default and ceiling: the server's)"`
	Pids     *int64   `json:"pids,omitempty" jsonschema:"process and thread count limit (default and ceiling: the server's)"`
	CPUs     *float64 `json:"cpus,omitempty" jsonschema:"CPU limit, e.g. 1.5 (default and ceiling: the server's)"`
	Network  string   `json:"network,omitempty" jsonschema:"none: loopback only; private: loopback only, and the names in allow through a proxy (default: the server's)"`
	Allow    []string `json:"allow,omitempty" jsonschema:"with network private: names the sandbox may reach (pypi.org, *.github.com), within what the server allows"`
	DiskMB   *int64   `json:"disk_mb,omitempty" jsonschema:"what the sandbox may write to disk outside its workspace, in MiB (default and ceiling: the server's)"`
	Keep     bool     `json:"keep,omitempty" jsonschema:"keep the sandbox when this MCP session ends"`
	// FromSnapshot names a snapshot (sandbox_snapshot) to start from.
	FromSnapshot string `json:"from_snapshot,omitempty" jsonschema:"start from this snapshot's files (sandbox_snapshot) instead of a fresh sandbox"`
	Use          bool   `json:"use,omitempty" jsonschema:"make it this session's default sandbox"`
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
	if o, ok := st.mine[sb.ID]; ok {
		out.Made, out.Keep = o.made, o.made && o.keep
	}
	return out
}

func (s *Server) sandboxCreate(ctx context.Context, st *session, _ *mcp.CallToolRequest, in SandboxCreateInput) (*mcp.CallToolResult, SandboxInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*s.cfg.CallTimeout)
	defer cancel()
	provider, err := s.cfg.provider(in.Provider)
	if err != nil {
		return nil, SandboxInfo{}, err
	}
	// The workspace and root filesystem are the server's to choose, never
	// the model's: a model must not mount a host directory of its choice.
	spec := runbox.SandboxSpec{Workdir: s.cfg.Spec.Workdir, Image: s.cfg.Spec.Image, Name: in.Name}
	if err := s.cfg.Limits.apply(&spec, in); err != nil {
		return nil, SandboxInfo{}, err
	}
	if in.Image != "" {
		spec.Image = in.Image
	}
	if in.FromSnapshot != "" {
		if err := st.checkSnapshot(in.FromSnapshot); err != nil {
			return nil, SandboxInfo{}, err
		}
		spec.FromSnapshot, spec.Image = in.FromSnapshot, ""
	}
	sb, err := s.place.Create(ctx, provider, spec)
	if err != nil {
		return nil, SandboxInfo{}, err
	}
	st.own(sb, true, in.Keep)
	if _, err := st.adopt(ctx, sb, true, in.Keep); err != nil {
		st.disown(sb.ID)
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
	if s.cfg.Sandbox != "" {
		// The bound sandbox is the session's from the start.
		if _, err := st.defaultSandbox(ctx); err != nil {
			return nil, SandboxList{}, err
		}
	}
	mine := st.owned()
	var sbs []runbox.Sandbox
	for _, o := range mine {
		sb, err := s.place.Get(ctx, o.sb.ID)
		switch {
		case errors.Is(err, runbox.ErrSandboxNotFound):
			st.disown(o.sb.ID) // removed from outside
			continue
		case err != nil:
			sb = o.sb
			sb.Alive = false
		}
		sbs = append(sbs, sb)
	}
	slices.SortFunc(sbs, func(a, b runbox.Sandbox) int { return a.Created.Compare(b.Created) })
	return st.listResult(sbs)
}

// listResult renders sandbox_list's result.
func (st *session) listResult(sbs []runbox.Sandbox) (*mcp.CallToolResult, SandboxList, error) {
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
	o, err := st.find(in.Sandbox)
	if err != nil {
		return nil, SandboxRemoveResult{}, err
	}
	id := o.sb.ID
	sb, err := s.place.Get(ctx, id)
	if errors.Is(err, runbox.ErrSandboxNotFound) {
		st.disown(id) // removed from outside
		return nil, SandboxRemoveResult{}, notFound(in.Sandbox)
	}
	if err != nil {
		return nil, SandboxRemoveResult{}, err
	}
	if err := s.place.Remove(ctx, sb, in.Force); err != nil {
		return nil, SandboxRemoveResult{}, err
	}
	st.disown(sb.ID)
	out := SandboxRemoveResult{ID: sb.ID, Removed: true}
	return textResult("removed sandbox " + sb.ID), out, nil
}

// offeredProviders answers a sandbox_create that names a provider not on
// offer with a tool error naming the ones that are. It runs before the
// input schema is checked: with one provider on offer the schema has no
// provider at all, and would refuse it without saying what is offered.
func (s *Server) offeredProviders(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if r, ok := req.(*mcp.CallToolRequest); ok && r.Params != nil && r.Params.Name == "sandbox_create" {
			var in struct {
				Provider string `json:"provider"`
			}
			if json.Unmarshal(r.Params.Arguments, &in) == nil {
				if _, err := s.cfg.provider(in.Provider); err != nil {
					res := &mcp.CallToolResult{}
					res.SetError(err)
					return res, nil
				}
			}
		}
		return next(ctx, method, req)
	}
}
