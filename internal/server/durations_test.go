package server_test

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1connect"
)

// TestDurationsOutOfRange: through serve (Run and the proxied exec API),
// a huge timeout, idle timeout or grace is invalid_argument naming the
// limit; and the Go client refuses them before sending.
func TestDurationsOutOfRange(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	tok := ts.token(t, "a")
	srv := ts.tenant(t, "a")
	sb, err := srv.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	rpc := runboxv1connect.NewRunboxServiceClient(http.DefaultClient, ts.url)
	for _, d := range []struct{ field, limit string }{
		{"timeoutMs", "runbox.MaxTimeout"}, {"idleTimeoutMs", "runbox.MaxIdleTimeout"}, {"graceMs", "runbox.MaxGrace"},
	} {
		for _, v := range []int64{math.MaxInt64, math.MaxInt64 / 1000, 31 * 24 * 3600 * 1000} {
			spec := fmt.Sprintf(`{"command":"sleep 5","%s":"%d"}`, d.field, v)
			for _, call := range []struct{ procedure, sandbox, body string }{
				{"/runbox.v1.SandboxService/Run", "", `{"sandboxId":"` + sb.ID + `","spec":` + spec + `}`},
			} {
				status, out := post(t, ts.url, tok, call.procedure, call.sandbox, []byte(call.body))
				msg, _ := out["message"].(string)
				if out["code"] != "invalid_argument" || !strings.Contains(msg, d.limit) {
					t.Errorf("%s %s=%d: %d %v, want invalid_argument naming %s", call.procedure, d.field, v, status, out, d.limit)
				}
			}
			// The exec API, proxied to runboxd: refused by the server.
			req := connect.NewRequest(&runboxv1.RunRequest{Spec: &runboxv1.ExecSpec{Command: "sleep 5"}})
			switch d.field {
			case "timeoutMs":
				req.Msg.Spec.TimeoutMs = v
			case "idleTimeoutMs":
				req.Msg.Spec.IdleTimeoutMs = v
			default:
				req.Msg.Spec.GraceMs = v
			}
			req.Header().Set("Authorization", "Bearer "+tok)
			req.Header().Set("Runbox-Sandbox", sb.ID)
			st, err := rpc.Run(ctx, req)
			if err == nil {
				for st.Receive() {
				}
				err = st.Err()
				st.Close()
			}
			if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), d.limit) {
				t.Errorf("proxied Run %s=%d: %v, want invalid_argument naming %s", d.field, v, err, d.limit)
			}
		}
	}
	for _, spec := range []runbox.ExecSpec{
		{Command: "sleep 5", Timeout: math.MaxInt64},
		{Command: "sleep 5", Grace: 2 * time.Hour},
	} {
		if _, _, err := srv.Run(ctx, sb.ID, spec); err == nil || !strings.Contains(err.Error(), "runbox.Max") {
			t.Errorf("client Run %+v: %v", spec, err)
		}
		if _, err := srv.Sandbox(sb.ID).ExecSpec(ctx, spec); err == nil || !strings.Contains(err.Error(), "runbox.Max") {
			t.Errorf("client ExecSpec %+v: %v", spec, err)
		}
	}
}
