package local_test

import (
	"archive/zip"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/provider/local"
)

// gitHTTPBackend is git's smart-HTTP server program, which the test runs
// as a CGI script (Debian's git ships it here).
const gitHTTPBackend = "/usr/lib/git-core/git-http-backend"

// selfSigned returns a certificate for name, signed by itself, and its
// PEM, which a client trusts as its CA.
func selfSigned(t *testing.T, name string) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: name},
		DNSNames:              []string{name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// wheel returns a pure-Python wheel of module at version 1.0 whose
// VALUE is value, and its file name.
func wheel(t *testing.T, module, value string) ([]byte, string) {
	t.Helper()
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	dist := module + "-1.0.dist-info/"
	for name, body := range map[string]string{
		module + ".py":    "VALUE = " + fmt.Sprintf("%q", value) + "\n",
		dist + "METADATA": "Metadata-Version: 2.1\nName: " + module + "\nVersion: 1.0\n",
		dist + "WHEEL":    "Wheel-Version: 1.0\nGenerator: runbox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		dist + "RECORD":   "",
	} {
		w, err := z.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), module + "-1.0-py3-none-any.whl"
}

// bareRepo makes a bare git repository under dir holding one commit with
// a file "marker" that says marker, and returns its name in dir.
func bareRepo(t *testing.T, dir, marker string) string {
	t.Helper()
	work := filepath.Join(dir, "work")
	for _, args := range [][]string{
		{"init", "-q", work},
		{"-C", work, "-c", "user.email=t@example.invalid", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "first"},
	} {
		if out, err := osexec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(work, "marker"), []byte(marker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-C", work, "add", "marker"},
		{"-C", work, "-c", "user.email=t@example.invalid", "-c", "user.name=t", "commit", "-q", "-m", "marker"},
		{"clone", "-q", "--bare", work, filepath.Join(dir, "repo.git")},
	} {
		if out, err := osexec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return "repo.git"
}

// TestNetworkPrivateHTTPSAndGit: through a private sandbox's proxy, with
// nothing but the environment runbox sets, real clients reach an allowed
// name over HTTPS on a server of the host's (a fresh certificate for a
// fresh name, its CA in the workspace): curl, `pip download` from a
// package index (an index page and a wheel, its sha256 checked by pip),
// and `git clone` over smart HTTP (git-http-backend), each by CONNECT
// with the name in its TLS SNI. The same clients are refused for a name
// that is not allowed, with a message naming the rule.
func TestNetworkPrivateHTTPSAndGit(t *testing.T) {
	for _, tool := range []string{"git", gitHTTPBackend} {
		if _, err := osexec.LookPath(tool); err != nil {
			t.Skipf("%s is not on this machine (apt-get install git): %v", tool, err)
		}
	}
	p := newProvider(t)
	tag := freshTag()
	name, denied := "pkg-"+tag+".test", "other-"+tag+".test"
	cert, caPEM := selfSigned(t, name)
	marker := rand.Text()
	module := "rb" + tag
	whl, whlName := wheel(t, module, marker)
	sum := sha256.Sum256(whl)
	repos := t.TempDir()
	repo := bareRepo(t, repos, marker)

	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, marker) })
	mux.HandleFunc("/simple/"+module+"/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="/files/%s#sha256=%s">%s</a></body></html>`, whlName, hex.EncodeToString(sum[:]), whlName)
	})
	mux.HandleFunc("/files/"+whlName, func(w http.ResponseWriter, r *http.Request) { w.Write(whl) })
	mux.Handle("/git/", &cgi.Handler{
		Path: gitHTTPBackend,
		Root: "/git",
		Env:  []string{"GIT_PROJECT_ROOT=" + repos, "GIT_HTTP_EXPORT_ALL=1"},
	})
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2 on this machine: %v", err)
	}
	srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "ca.pem"), caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	_, c := create(t, p, runbox.SandboxSpec{Workdir: ws, Network: local.NetworkPrivate, Egress: runbox.EgressPolicy{
		Allow:     []string{name},
		AllowCIDR: []string{"127.0.0.2/32"},
		Resolve:   map[string]string{name: "127.0.0.2", denied: "127.0.0.2"},
	}})
	base := fmt.Sprintf("https://%s:%d", name, port)

	if got := run(t, c, "curl -sS --max-time 20 --cacert /workspace/ca.pem "+base+"/hello"); got != marker {
		t.Errorf("curl over HTTPS through the proxy: %q, want %q", got, marker)
	}
	res := exec(t, c, fmt.Sprintf("cd /tmp && python3 -m pip download -q --no-deps --disable-pip-version-check --cert /workspace/ca.pem --index-url %s/simple/ -d /tmp/dl %s && python3 -c 'import sys, zipfile; sys.stdout.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]).decode())' /tmp/dl/%s %s.py", base, module, whlName, module),
		client.WithTimeout(2*time.Minute))
	if want := fmt.Sprintf("VALUE = %q\n", marker); res.ExitCode != 0 || string(res.Stdout) != want {
		if exec(t, c, "python3 -m pip --version").ExitCode != 0 {
			t.Log("this machine's python3 has no pip (apt-get install python3-pip): the pip case is left out")
		} else {
			t.Errorf("pip download over HTTPS through the proxy: exit %d, %q, want %q\n%s", res.ExitCode, res.Stdout, want, res.Stderr)
		}
	}
	res = exec(t, c, fmt.Sprintf("git -c http.sslCAInfo=/workspace/ca.pem clone -q %s/git/%s /tmp/r && cat /tmp/r/marker", base, repo),
		client.WithTimeout(2*time.Minute))
	if res.ExitCode != 0 || string(res.Stdout) != marker+"\n" {
		t.Errorf("git clone over HTTPS through the proxy: exit %d, %q, want %q\n%s", res.ExitCode, res.Stdout, marker, res.Stderr)
	}

	// A name the policy does not allow (resolvable, the same server):
	// refused at CONNECT, whatever the client.
	deniedURL := fmt.Sprintf("https://%s:%d", denied, port)
	for what, cmd := range map[string]string{
		"curl": "curl -sS --max-time 20 --cacert /workspace/ca.pem " + deniedURL + "/hello",
		"git":  fmt.Sprintf("git -c http.sslCAInfo=/workspace/ca.pem clone -q %s/git/%s /tmp/r2", deniedURL, repo),
	} {
		res := exec(t, c, cmd)
		out := string(res.Stdout) + string(res.Stderr)
		if res.ExitCode == 0 || strings.Contains(out, marker) {
			t.Errorf("%s to the denied name over HTTPS: exit %d, %q", what, res.ExitCode, out)
		}
		if what == "curl" && !strings.Contains(out, "403") {
			t.Errorf("curl to the denied name: %q, want the proxy's 403", out)
		}
	}
}
