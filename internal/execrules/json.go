package execrules

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/runbox/runbox"
)

// Result is the JSON object exec --json prints: every field of
// runbox.Result, named as the API's result message names it
// (proto/runbox/v1: exit_code, stdout_dropped, ...), except the duration,
// in milliseconds. Stdout and Stderr are the output as text; when a stream
// is not valid UTF-8, its text has each invalid byte replaced by U+FFFD and
// StdoutBase64/StderrBase64 carry the exact bytes.
type Result struct {
	ID            string `json:"id"`
	ExitCode      int    `json:"exit_code"`
	Signal        string `json:"signal"`
	TimedOut      bool   `json:"timed_out"`
	Cancelled     bool   `json:"cancelled"`
	IdleTimedOut  bool   `json:"idle_timed_out"`
	OOMKilled     bool   `json:"oom_killed"`
	DurationMS    int64  `json:"duration_ms"`
	Pid           int    `json:"pid"`
	Stdout        string `json:"stdout"`
	Stderr        string `json:"stderr"`
	StdoutBase64  string `json:"stdout_base64,omitempty"`
	StderrBase64  string `json:"stderr_base64,omitempty"`
	StdoutDropped int64  `json:"stdout_dropped"`
	StderrDropped int64  `json:"stderr_dropped"`
	StdoutBytes   int64  `json:"stdout_bytes"`
	StderrBytes   int64  `json:"stderr_bytes"`
	StdoutSpill   string `json:"stdout_spill"`
	StderrSpill   string `json:"stderr_spill"`
	// StdoutSpillOffset and StderrSpillOffset are the stream offsets the
	// spill files start at (0 but for a spill that follows a live stream).
	StdoutSpillOffset int64 `json:"stdout_spill_offset"`
	StderrSpillOffset int64 `json:"stderr_spill_offset"`
	// SpillTruncated says a spill file holds less than the whole stream
	// (the spill budget ran out, the disk filled, a write failed): it holds
	// the stream's first bytes, or was removed to make room.
	SpillTruncated  bool   `json:"spill_truncated"`
	Cwd             string `json:"cwd"`
	CwdFallbackFrom string `json:"cwd_fallback_from"`
	Killed          int    `json:"killed"`
	Survivors       int    `json:"survivors"`
	LeftRunning     int    `json:"left_running"`
	StreamGaps      int    `json:"stream_gaps"`
	StreamLost      int64  `json:"stream_lost"`
}

// ResultJSON is r as exec --json prints it.
func ResultJSON(r runbox.Result) Result {
	out := Result{
		ID:                r.ID,
		ExitCode:          r.ExitCode,
		Signal:            r.Signal,
		TimedOut:          r.TimedOut,
		Cancelled:         r.Cancelled,
		IdleTimedOut:      r.IdleTimedOut,
		OOMKilled:         r.OOMKilled,
		DurationMS:        r.Duration.Milliseconds(),
		Pid:               r.Pid,
		StdoutDropped:     r.StdoutDropped,
		StderrDropped:     r.StderrDropped,
		StdoutBytes:       r.StdoutBytes,
		StderrBytes:       r.StderrBytes,
		StdoutSpill:       r.StdoutSpill,
		StderrSpill:       r.StderrSpill,
		StdoutSpillOffset: r.StdoutSpillOffset,
		StderrSpillOffset: r.StderrSpillOffset,
		SpillTruncated:    r.SpillTruncated,
		Cwd:               r.Cwd,
		CwdFallbackFrom:   r.CwdFallbackFrom,
		Killed:            r.Killed,
		Survivors:         r.Survivors,
		LeftRunning:       r.LeftRunning,
		StreamGaps:        r.StreamGaps,
		StreamLost:        r.StreamLost,
	}
	out.Stdout, out.StdoutBase64 = text(r.Stdout)
	out.Stderr, out.StderrBase64 = text(r.Stderr)
	return out
}

// text returns b as a string, and when b is not valid UTF-8 also its exact
// bytes in base64.
func text(b []byte) (s, b64 string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), base64.StdEncoding.EncodeToString(b)
}

// WriteJSON prints v as one line of JSON, HTML characters unescaped.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}
