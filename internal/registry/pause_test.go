package registry

import (
	"context"
	"testing"
	"time"
)

// TestPauseKeepsTheFirstPauseTime: a paused sandbox's record says since
// when; a second pause keeps the first time; Resume clears it and sets the
// last use it is given; a paused record from before pause times were kept
// (paused = 1) reads as paused at an unknown time.
func TestPauseKeepsTheFirstPauseTime(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t)
	t0 := time.UnixMilli(1_900_000_000_000)
	if err := s.InsertSandbox(ctx, Sandbox{ID: "sb1", Tenant: "a", Provider: "local", ProviderID: "p1", Spec: "{}",
		State: StateReady, Created: t0, LastUsed: t0}); err != nil {
		t.Fatal(err)
	}
	get := func() Sandbox {
		t.Helper()
		sb, err := s.GetSandbox(ctx, "a", "sb1")
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	if sb := get(); sb.Paused || !sb.PausedAt.IsZero() {
		t.Fatalf("a new sandbox reads paused: %v at %v", sb.Paused, sb.PausedAt)
	}
	for _, at := range []time.Time{t0.Add(time.Minute), t0.Add(time.Hour)} {
		if err := s.Pause(ctx, "sb1", at); err != nil {
			t.Fatal(err)
		}
	}
	if sb := get(); !sb.Paused || !sb.PausedAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("paused twice: %v at %v, want paused at the first pause, %v", sb.Paused, sb.PausedAt, t0.Add(time.Minute))
	}
	last := t0.Add(59 * time.Minute)
	if err := s.Resume(ctx, "sb1", last); err != nil {
		t.Fatal(err)
	}
	if sb := get(); sb.Paused || !sb.PausedAt.IsZero() || !sb.LastUsed.Equal(last) {
		t.Errorf("resumed: paused %v at %v, last used %v; want running, last used %v", sb.Paused, sb.PausedAt, sb.LastUsed, last)
	}
	if _, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET paused = 1 WHERE id = 'sb1'`); err != nil {
		t.Fatal(err)
	}
	if sb := get(); !sb.Paused || !sb.PausedAt.IsZero() {
		t.Errorf("an old paused record: %v at %v, want paused at an unknown time", sb.Paused, sb.PausedAt)
	}
}
