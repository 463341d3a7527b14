package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Signed port URLs: a signature over the tenant, the sandbox id, the port,
// the port's exposure (a random nonce the registry keeps while the port is
// exposed) and the expiry, by a key only the server holds (in its
// registry). The URL carries the expiry and the signature; the tenant
// comes from the sandbox's registry row and the nonce from its exposure,
// so a URL cannot be moved to another sandbox, port or tenant, nor its
// expiry changed, and UnexposePort revokes it for good: exposing the port
// again makes a new nonce.
const (
	// portSecretName names the signing key in the registry.
	portSecretName = "port-url-hmac"
	// expiresParam and signatureParam are the signed URL's query
	// parameters; they never reach the sandbox.
	expiresParam   = "runbox_expires"
	signatureParam = "runbox_signature"
	// portCookie carries a signed URL's expiry and signature on a
	// browser's later requests under the same port's route (a page's
	// scripts and images), scoped to that route's path.
	portCookie = "runbox_port_auth"
	// defaultURLTTL and maxURLTTL: a signed URL's validity when the
	// caller asks for none, and the most it may ask for.
	defaultURLTTL = time.Hour
	maxURLTTL     = 7 * 24 * time.Hour
)

// portSigner signs and checks port URLs with the server's key, read from
// the registry (made there the first time) on first use.
type portSigner struct {
	mu  sync.Mutex
	key []byte
}

func (s *Server) portKey(ctx context.Context) ([]byte, error) {
	s.signer.mu.Lock()
	defer s.signer.mu.Unlock()
	if s.signer.key == nil {
		k, err := s.store.ServerSecret(ctx, portSecretName)
		if err != nil {
			return nil, err
		}
		s.signer.key = k
	}
	return s.signer.key, nil
}

// portSignature is the signature of a URL for port of sandbox (of tenant)
// under the exposure whose nonce is given, valid until expires (unix
// seconds). Every field is fixed-form or the registry's (no tenant
// chooses one), and each is NUL-terminated, so no two inputs sign alike.
func portSignature(key []byte, tenant, sandbox string, port int, nonce string, expires int64) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "runbox-port-url-v2\x00%s\x00%s\x00%d\x00%s\x00%d", tenant, sandbox, port, nonce, expires)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// errSignatureMismatch is the answer for a signed URL that does not verify,
// the same whether it was altered, made for another sandbox or port, the
// sandbox does not exist, or the port was unexposed since (its exposure's
// nonce gone): it tells nothing about sandboxes it does not sign.
var errSignatureMismatch = &signedURLError{msg: "the signed URL's signature does not match an exposed port of this sandbox " +
	"(altered, made for another sandbox or port, or revoked: the port is not exposed since it was made): ask ExposePort for a fresh URL"}

// errSignature and errExpired tell a bad signed URL from an expired one.
type signedURLError struct {
	msg     string
	expired bool
}

func (e *signedURLError) Error() string { return e.msg }

// checkPortSignature checks a signed URL's expiry and signature (in
// constant time) for port of sandbox of tenant under the exposure whose
// nonce is given ("" for none: nothing matches), at now.
func checkPortSignature(key []byte, tenant, sandbox string, port int, nonce, expiresParamValue, sig string, now time.Time) error {
	expires, err := strconv.ParseInt(expiresParamValue, 10, 64)
	if err != nil {
		return &signedURLError{msg: fmt.Sprintf("the signed URL's %s %q is not a time: ask ExposePort for a fresh URL", expiresParam, expiresParamValue)}
	}
	want := portSignature(key, tenant, sandbox, port, nonce, expires)
	if !hmac.Equal([]byte(want), []byte(sig)) || nonce == "" {
		return errSignatureMismatch
	}
	if now.Unix() >= expires {
		return &signedURLError{expired: true, msg: fmt.Sprintf("the signed URL expired at %s: ask ExposePort for a fresh URL",
			time.Unix(expires, 0).UTC().Format(time.RFC3339))}
	}
	return nil
}
