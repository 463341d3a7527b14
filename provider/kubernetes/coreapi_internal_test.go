package kubernetes

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// TestCoreAPIRequests: the provider's core/v1 client (coreapi.go, a REST
// client over a scheme of core/v1 alone) makes the requests client-go's
// typed client makes, against a stand-in API server that records them:
// paths, query parameters (label selectors, the exec subresource's
// options), bodies, decoded answers, and a Status error read as NotFound.
// The provider's behaviour against a real cluster is CI's (main_test.go).
func TestCoreAPIRequests(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" "+strings.TrimSpace(string(body)))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == "GET" && r.URL.Path == "/api/v1/namespaces/ns/pods/missing":
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: 404, Message: `pods "missing" not found`})
		case r.Method == "GET" && r.URL.Path == "/api/v1/namespaces/ns/pods":
			json.NewEncoder(w).Encode(corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
				Items: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "p1", UID: "u1"}}}})
		case r.Method == "POST" && r.URL.Path == "/api/v1/namespaces/ns/secrets":
			var s corev1.Secret
			json.Unmarshal(body, &s)
			s.UID = "s-uid"
			json.NewEncoder(w).Encode(s)
		case r.Method == "DELETE":
			json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess})
		default:
			w.WriteHeader(http.StatusTeapot)
		}
	}))
	defer srv.Close()
	p := &Provider{Config: &rest.Config{Host: srv.URL}, Namespace: "ns"}
	defer p.Close()
	api, err := p.client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	if _, err := api.pods.Get(ctx, "missing", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get of a missing pod: %v; want NotFound", err)
	}
	list, err := api.pods.List(ctx, metav1.ListOptions{LabelSelector: LabelSandbox + "=0123456789ab"})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "p1" || list.Items[0].UID != "u1" {
		t.Errorf("list: %+v, %v; want pod p1", list, err)
	}
	s, err := api.secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s1"}, Data: map[string][]byte{secretKey: []byte("x")}}, metav1.CreateOptions{})
	if err != nil || s.UID != "s-uid" || string(s.Data[secretKey]) != "x" {
		t.Errorf("create secret: %+v, %v; want it back with its uid", s, err)
	}
	uid := metav1.Preconditions{UID: ptr(types.UID("u1"))}
	if err := api.pods.Delete(ctx, "p1", metav1.DeleteOptions{Preconditions: &uid}); err != nil {
		t.Errorf("delete: %v", err)
	}
	execURL := api.rest.Post().Resource("pods").Namespace("ns").Name("p1").SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: containerName, Command: []string{podRunboxd, "proxy"}, Stdin: true, Stdout: true}, api.params).URL()
	if execURL.Path != "/api/v1/namespaces/ns/pods/p1/exec" ||
		execURL.RawQuery != "command=%2F.runbox%2Frunboxd&command=proxy&container=sandbox&stdin=true&stdout=true" {
		t.Errorf("exec URL: %s; want the exec subresource with its options as query parameters", execURL)
	}

	mu.Lock()
	defer mu.Unlock()
	want := []string{
		"GET /api/v1/namespaces/ns/pods/missing? ",
		"GET /api/v1/namespaces/ns/pods?labelSelector=runbox.dev%2Fsandbox%3D0123456789ab ",
		"POST /api/v1/namespaces/ns/secrets? ",
		"DELETE /api/v1/namespaces/ns/pods/p1? ",
	}
	if len(got) != len(want) {
		t.Fatalf("requests: %q; want %d", got, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("request %d: %q; want it to start %q", i, got[i], w)
		}
	}
	if !strings.Contains(got[2], `"name":"s1"`) || !strings.Contains(got[3], `"preconditions":{"uid":"u1"}`) {
		t.Errorf("bodies: %q, %q; want the secret and the delete's precondition", got[2], got[3])
	}
}

func ptr[T any](v T) *T { return &v }
