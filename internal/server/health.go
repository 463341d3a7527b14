package server

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// healthz answers 200 while the process serves: liveness, no token needed.
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
}

// readyz answers 200 once the server has started and its registry answers,
// with the sandboxes found at start that the registry does not know.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	type unknown struct {
		ID       string `json:"id"`
		Provider string `json:"provider"`
	}
	out := struct {
		Ready   bool      `json:"ready"`
		Error   string    `json:"error,omitempty"`
		Unknown []unknown `json:"unknown_sandboxes"`
	}{Ready: true, Unknown: []unknown{}}
	s.mu.Lock()
	started := s.started
	for _, sb := range s.unknown {
		out.Unknown = append(out.Unknown, unknown{sb.ID, sb.Provider})
	}
	s.mu.Unlock()
	if !started {
		out.Ready, out.Error = false, "starting"
	} else if err := s.store.Ping(ctx); err != nil {
		out.Ready, out.Error = false, "registry: "+err.Error()
	}
	w.Header().Set("Content-Type", "application/json")
	if !out.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	json.NewEncoder(w).Encode(out)
}
