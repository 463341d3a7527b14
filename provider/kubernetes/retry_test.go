package kubernetes_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/provider/kubernetes"
)

// apiServer is a stand-in API server that answers the pod list with the
// statuses given, one per request (the last one repeats), and counts the
// requests.
func apiServer(t *testing.T, statuses ...int) (*rest.Config, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		code := statuses[min(i, len(statuses)-1)]
		if !strings.HasSuffix(r.URL.Path, "/pods") {
			code = http.StatusNotFound
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		if code == http.StatusOK {
			w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}`))
			return
		}
		w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":` + strconv.Itoa(code) + `}`))
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}, &n
}

// TestTransientFailuresRetried: 503s and 500s are retried until the server
// answers; a 404 is not retried; a server that keeps failing is given up on
// after a bounded number of attempts, with its error.
func TestTransientFailuresRetried(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cfg, n := apiServer(t, 503, 500, 200)
	p := &kubernetes.Provider{Config: cfg}
	if sbs, err := p.List(ctx); err != nil || len(sbs) != 0 {
		t.Errorf("list after 503, 500, 200: %v %v; want an empty list", sbs, err)
	}
	if got := n.Load(); got != 3 {
		t.Errorf("list after 503, 500, 200: %d requests, want 3", got)
	}

	cfg, n = apiServer(t, 403)
	p = &kubernetes.Provider{Config: cfg}
	if _, err := p.List(ctx); err == nil {
		t.Error("list answered 403: no error")
	}
	if got := n.Load(); got != 1 {
		t.Errorf("list answered 403: %d requests, want 1 (not transient)", got)
	}

	cfg, n = apiServer(t, 500)
	p = &kubernetes.Provider{Config: cfg}
	_, err := p.List(ctx)
	if err == nil || errors.Is(err, runbox.ErrProviderUnavailable) {
		t.Errorf("list always answered 500: %v; want the server's error", err)
	}
	if got := n.Load(); got < 2 || got > 10 {
		t.Errorf("list always answered 500: %d requests; want a few retries, bounded", got)
	}

	// Nothing listens: the provider is unavailable, said at once.
	p = &kubernetes.Provider{Config: &rest.Config{Host: "https://127.0.0.1:1"}}
	if _, err := p.List(ctx); !errors.Is(err, runbox.ErrProviderUnavailable) {
		t.Errorf("list with no server: %v; want ErrProviderUnavailable", err)
	}
}
