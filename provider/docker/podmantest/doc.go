// Package podmantest runs the docker provider's tests against Podman's
// Docker-compatible API service, rootful and rootless (docs/podman.md). It
// has no API: its one test, TestPodman, builds provider/docker's test
// binary and runs the conformance suite and the provider's own cases in it
// against each Podman service, as a child process (rootless as the
// service's plain user). It is a package of its own so that `go test ./...`
// runs it beside provider/docker, each within its own -timeout, instead of
// adding Podman's runs to the docker package's.
package podmantest
