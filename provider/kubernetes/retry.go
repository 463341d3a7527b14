package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/runbox/runbox"
)

// Backoff between attempts of a call that failed transiently, unless the
// server asks for a longer wait (Retry-After).
const (
	minRetryDelay = 100 * time.Millisecond
	maxRetryDelay = 2 * time.Second
	// maxServerDelay caps how long a Retry-After is honoured.
	maxServerDelay = 10 * time.Second
)

// call runs fn, each attempt bounded by apiTimeout (and ctx), and retries
// it while it fails transiently (see transient), up to apiAttempts times,
// waiting as the server asks (Retry-After) or backing off. what names the
// call in the error. An API server that cannot be reached at all is
// runbox.ErrProviderUnavailable.
func call(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	delay := minRetryDelay
	var err error
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, apiTimeout)
		err = fn(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || attempt >= apiAttempts || !transient(err) {
			break
		}
		wait := delay
		if s, ok := apierrors.SuggestsClientDelay(err); ok && s > 0 {
			wait = min(time.Duration(s)*time.Second, maxServerDelay)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (after %d attempts; last: %v)", what, ctx.Err(), attempt, err)
		case <-time.After(wait):
		}
		delay = min(delay*2, maxRetryDelay)
	}
	if unreachable(err) {
		return fmt.Errorf("%w: %s: the kubernetes API server does not answer (check KUBECONFIG and --context, or start the cluster): %w",
			runbox.ErrProviderUnavailable, what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// transient reports whether err is worth another attempt: the server was
// overloaded or timed out (429, 5xx, 504), or the connection failed or was
// reset on the way.
func transient(err error) bool {
	switch {
	case apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
		apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsUnexpectedServerError(err):
		return true
	case errors.Is(err, context.DeadlineExceeded): // one attempt's own timeout
		return true
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return code == 429 || code >= 500
	}
	return unreachable(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// unreachable reports whether err says the server could not be reached.
func unreachable(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}
