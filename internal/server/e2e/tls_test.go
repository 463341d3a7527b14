package e2e_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns
// their paths and a pool trusting the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "runbox test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestTLS: with --tls-cert and --tls-key the server speaks HTTPS (HTTP/2),
// and the Go client streams an exec through it.
func TestTLS(t *testing.T) {
	cert, key, pool := selfSigned(t)
	sp := startServe(t, "--tls-cert", cert, "--tls-key", key)
	ctx := ctxT(t)
	url := strings.Replace(sp.url, "http://", "https://", 1)
	srv, err := client.NewServer(url, sp.token("tls"), client.WithTLSConfig(&tls.Config{RootCAs: pool}))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	sb, err := srv.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Sandbox(sb.ID)
	defer c.Close()
	var out strings.Builder
	res, err := c.Exec(ctx, "echo over tls", client.WithStdout(&out))
	if err != nil || res.ExitCode != 0 || out.String() != "over tls\n" {
		t.Fatalf("exec over TLS: %+v, %q, %v", res, out.String(), err)
	}
	// Plain HTTP is not served on the TLS port.
	plain, _ := client.NewServer(sp.url, "x")
	defer plain.Close()
	if _, err := plain.List(ctx); err == nil {
		t.Fatal("plain HTTP answered on the TLS port")
	}
}

// TestServeRefusesPlainHTTPOffLoopback: without TLS, a non-loopback
// address needs --insecure.
func TestServeRefusesPlainHTTPOffLoopback(t *testing.T) {
	sp := startServe(t)
	_, e, code := sp.runbox(nil, "serve", "--providers", "host", "--allow-host-provider", "--listen", "0.0.0.0:0", "--db", sp.db)
	if code != 125 || !strings.Contains(e, "--insecure") || !strings.Contains(e, "plain HTTP") {
		t.Fatalf("serve on 0.0.0.0 without TLS: %d %q", code, e)
	}
}
