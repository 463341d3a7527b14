package server_test

import (
	"net/http"
	"testing"
	"time"
)

// waitReady polls /healthz until the server answers.
func waitReady(t testing.TB, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server at %s not healthy: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
