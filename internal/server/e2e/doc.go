// Package e2e holds the acceptance tests of runbox serve: a real `runbox
// serve` process with a real SQLite file, driven by the Go client, the CLI
// binary, curl as the README writes it, the stdlib-only Python example, and
// a Node.js client built from the project's proto. It has no code of its
// own.
package e2e
