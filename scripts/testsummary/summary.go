package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time        time.Time
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	ImportPath  string // build-output, build-fail
	FailedBuild string
}

// skip is a skipped test and why.
type skip struct {
	pkg, test, reason string
}

// timing is how long one top-level test took.
type timing struct {
	name    string // "pkg TestName"
	elapsed float64
}

// slowestShown is how many of the slowest tests report lists: where a
// long CI run spends its time.
const slowestShown = 15

// summary accumulates a run's events.
type summary struct {
	w io.Writer

	output  map[string]*strings.Builder // per package/test, until it ends
	started map[string]bool             // packages without a final action yet
	skips   []skip
	passed  int
	timed   []timing // top-level tests that passed or failed, with their time
	failed  []string // "pkg TestName", "pkg (package)", "pkg (build)"
	notJSON int
}

func newSummary(w io.Writer) *summary {
	return &summary{w: w, output: make(map[string]*strings.Builder), started: make(map[string]bool)}
}

// read consumes the event stream. A line that is not an event (go vet's
// or the linker's complaints) is printed as it is.
func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			s.notJSON++
			fmt.Fprintln(s.w, string(line))
			continue
		}
		s.handle(ev)
	}
	return sc.Err()
}

func key(pkg, test string) string { return pkg + " " + test }

func (s *summary) handle(ev event) {
	switch ev.Action {
	case "build-output":
		fmt.Fprint(s.w, ev.Output)
		return
	case "build-fail":
		s.failed = append(s.failed, ev.ImportPath+" (build)")
		return
	case "start":
		s.started[ev.Package] = true
		return
	}
	k := key(ev.Package, ev.Test)
	switch ev.Action {
	case "output":
		b := s.output[k]
		if b == nil {
			b = &strings.Builder{}
			s.output[k] = b
		}
		b.WriteString(ev.Output)
		if ev.Test == "" && ev.Output != "PASS\n" && !strings.HasPrefix(ev.Output, "=== ") {
			// A package's own lines: "ok  pkg 1.2s", "FAIL pkg", a
			// TestMain's complaint, a timeout's panic.
			fmt.Fprint(s.w, ev.Output)
		}
	case "pass", "fail", "skip":
		out := ""
		if b := s.output[k]; b != nil {
			out = b.String()
		}
		delete(s.output, k)
		if ev.Test == "" {
			delete(s.started, ev.Package)
			if ev.Action == "fail" && !slices.ContainsFunc(s.failed, func(f string) bool { return strings.HasPrefix(f, ev.Package+" ") }) {
				s.failed = append(s.failed, ev.Package+" (package)")
			}
			return
		}
		if !strings.Contains(ev.Test, "/") && ev.Action != "skip" {
			s.timed = append(s.timed, timing{k, ev.Elapsed})
		}
		switch ev.Action {
		case "pass":
			s.passed++
		case "fail":
			s.failed = append(s.failed, k)
			fmt.Fprintf(s.w, "--- FAIL: %s (%s)\n%s", ev.Test, ev.Package, indent(out))
		case "skip":
			s.skips = append(s.skips, skip{ev.Package, ev.Test, skipReason(out)})
		}
	}
}

// skipReason is the message a test gave t.Skip: the last entry it logged
// before its "--- SKIP" line (t.Skip logs its message, then the result),
// with the entry's continuation lines.
func skipReason(out string) string {
	var entries [][]string
	for _, l := range strings.Split(out, "\n") {
		t := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(t, "--- SKIP"):
			return lastEntry(entries)
		case t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- "):
		case strings.HasPrefix(l, "        ") && len(entries) > 0: // a continuation
			entries[len(entries)-1] = append(entries[len(entries)-1], t)
		default:
			entries = append(entries, []string{t})
		}
	}
	return lastEntry(entries)
}

// lastEntry is the last entry a test logged (t.Log's "file.go:N: "
// prefix), passing over lines that other writers of the process put
// between it and its result (client-go's klog, say); without a logged
// entry, the last line.
func lastEntry(entries [][]string) string {
	if len(entries) == 0 {
		return "(no reason given)"
	}
	for i := len(entries) - 1; i >= 0; i-- {
		if testLogLine.MatchString(entries[i][0]) {
			return strings.Join(entries[i], " | ")
		}
	}
	return strings.Join(entries[len(entries)-1], " | ")
}

// testLogLine is how a line of t.Log, t.Skip or t.Error starts.
var testLogLine = regexp.MustCompile(`^[\w.-]+\.go:\d+: `)

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}

// report prints the skips and the totals, and reports whether the run
// passed.
func (s *summary) report() bool {
	for pkg := range s.started {
		s.failed = append(s.failed, pkg+" (no result: go test was killed, or crashed)")
	}
	fmt.Fprintln(s.w)
	if len(s.timed) > 0 {
		slices.SortFunc(s.timed, func(a, b timing) int { return cmp.Compare(b.elapsed, a.elapsed) })
		n := min(slowestShown, len(s.timed))
		fmt.Fprintf(s.w, "%d slowest tests:\n", n)
		for _, tm := range s.timed[:n] {
			fmt.Fprintf(s.w, "  %7.1fs %s\n", tm.elapsed, tm.name)
		}
	}
	if len(s.skips) > 0 {
		fmt.Fprintf(s.w, "%d skipped tests:\n", len(s.skips))
		slices.SortFunc(s.skips, func(a, b skip) int { return strings.Compare(a.pkg+" "+a.test, b.pkg+" "+b.test) })
		for _, sk := range s.skips {
			fmt.Fprintf(s.w, "  SKIP %s %s: %s\n", sk.pkg, sk.test, sk.reason)
		}
	}
	slices.Sort(s.failed)
	for _, f := range s.failed {
		fmt.Fprintf(s.w, "  FAIL %s\n", f)
	}
	fmt.Fprintf(s.w, "tests: %d passed, %d failed, %d skipped\n", s.passed, len(s.failed), len(s.skips))
	return len(s.failed) == 0
}
