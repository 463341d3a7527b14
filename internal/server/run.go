package server

import (
	"context"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
)

// Run runs one command to its end and answers with its result. The
// sandbox is the request's sandbox_id, else the Runbox-Sandbox header.
// If the caller leaves first, the exec goes on (runboxd owns its lifetime)
// and its audit row still gets its result.
func (h *sandboxService) Run(ctx context.Context, req *connect.Request[runboxv1.RunCommandRequest]) (*connect.Response[runboxv1.RunCommandResponse], error) {
	if err := h.s.checkExecSpec("spec", req.Msg.GetSpec()); err != nil {
		return nil, err
	}
	key := req.Msg.GetSandboxId()
	if key == "" {
		key = req.Header().Get(SandboxHeader)
	}
	if key == "" {
		return nil, invalid("sandbox_id", "empty: give the id or name of the sandbox to run in")
	}
	r, err := h.s.route(ctx, key)
	if err != nil {
		return nil, err
	}
	defer r.release()
	res, err := h.s.runExec(ctx, r, &runboxv1.RunRequest{Spec: req.Msg.GetSpec()},
		func(*runboxv1.ExecEvent) error { return nil }, false)
	if err != nil {
		return nil, err
	}
	out := connect.NewResponse(&runboxv1.RunCommandResponse{Result: res, Recreated: r.recreated})
	markRecreated(r, out.Header())
	return out, nil
}
