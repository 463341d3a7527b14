// Command testsummary reads `go test -json` on stdin and prints what a
// person needs: each package's result line as it finishes, the output of
// every failed test, and at the end the slowest tests (where a long run's
// time goes) and every skipped test with its reason (a plain `go test`
// hides skips: a package whose tests all skipped says "ok").
// It exits 1 when any test, package or build failed, or a package never
// reported its result (go test killed), so a pipeline ending in it keeps
// an honest status:
//
//	go test -race -timeout 30m -json ./... | go run ./scripts/testsummary
package main

import (
	"fmt"
	"os"
)

func main() {
	s := newSummary(os.Stdout)
	if err := s.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if !s.report() {
		os.Exit(1)
	}
}
