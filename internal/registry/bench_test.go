package registry

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkExecPath times, one by one, the registry calls runbox serve
// makes for every exec: the token check, the sandbox lookup, the audit
// row's open and its finish. Their sum is the registry's part of serve's
// cost per exec.
func BenchmarkExecPath(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "runbox.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	_, secret, err := s.CreateToken(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	if err := s.InsertSandbox(ctx, Sandbox{ID: "sb-000000000001", Tenant: "bench", Provider: "host", ProviderID: "p1",
		Spec: "{}", State: StateReady, Created: now, LastUsed: now}); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		op   func(i int) error
	}{
		{"authenticate", func(int) error { _, err := s.Authenticate(ctx, secret); return err }},
		{"get-sandbox", func(int) error { _, err := s.GetSandbox(ctx, "bench", "sb-000000000001"); return err }},
		{"open-exec", func(i int) error {
			_, _, err := s.OpenExec(ctx, "bench", "sb-000000000001", fmt.Sprintf("e%d", i), "true")
			return err
		}},
		{"open-and-finish-exec", func(i int) error {
			row, _, err := s.OpenExec(ctx, "bench", "sb-000000000001", fmt.Sprintf("f%d", i), "true")
			if err != nil {
				return err
			}
			return s.FinishExec(ctx, row, ExecResult{Outcome: "exited"})
		}},
		{"plain-insert", func(i int) error {
			_, err := s.db.ExecContext(ctx, openExecInsertQuery, "bench", "sb-000000000001", fmt.Sprintf("g%d", i), "true", ms(time.Now()))
			return err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if err := c.op(i); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
