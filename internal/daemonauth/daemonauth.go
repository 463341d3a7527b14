// Package daemonauth authenticates every connection to runboxd with a
// per-sandbox secret that only the host side holds.
//
// The secret is 32 random bytes made when the sandbox is created. The
// provider keeps it on the host side (a 0600 file in the sandbox's state
// directory, or a container label) and gives runboxd only its SHA-256, so
// nothing readable inside the sandbox (runboxd's argv, environment or
// memory) lets a command authenticate.
//
// The handshake runs on the raw byte stream, before HTTP/2 starts, inside
// the provider's [runbox.Dialer]: every client, every provider and every
// stream (a unix socket, a `docker exec runboxd proxy` pipe) gets it
// without API changes. The dialer sends one fixed-length line,
//
//	RUNBOXD-AUTH 1 <the secret, 64 hex digits>\n
//
// and the daemon answers "RUNBOXD-AUTH OK\n", or
// "RUNBOXD-AUTH REFUSED <reason>\n" and closes the connection. The client
// maps a refusal to runbox.ErrUnauthenticated.
package daemonauth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// SecretSize is the length of a sandbox's secret in bytes.
const SecretSize = 32

// Wire format.
const (
	magic       = "RUNBOXD-AUTH 1 "
	preambleLen = len(magic) + 2*SecretSize + 1
	okLine      = "RUNBOXD-AUTH OK\n"
	refused     = "RUNBOXD-AUTH REFUSED "
	// maxStatusLine bounds the daemon's answer the client reads.
	maxStatusLine = 256
)

// Timeout bounds the handshake on either side: a peer that sends or
// answers nothing within it is dropped.
const Timeout = 10 * time.Second

// NewSecret returns a fresh random secret of SecretSize bytes.
func NewSecret() ([]byte, error) {
	b := make([]byte, SecretSize)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("sandbox secret: %w", err)
	}
	return b, nil
}

// Sum returns the SHA-256 of secret in hex: what runboxd is given.
func Sum(secret []byte) string {
	s := sha256.Sum256(secret)
	return hex.EncodeToString(s[:])
}

// ParseSum parses a hex SHA-256 as Sum writes it.
func ParseSum(s string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != sha256.Size {
		return sum, errors.New("want the SHA-256 of the sandbox's secret: 64 hex digits")
	}
	copy(sum[:], b)
	return sum, nil
}

// CheckSecret reports whether b is a secret as NewSecret makes them.
func CheckSecret(b []byte) error {
	if len(b) != SecretSize {
		return fmt.Errorf("sandbox secret has %d bytes, want %d", len(b), SecretSize)
	}
	return nil
}
