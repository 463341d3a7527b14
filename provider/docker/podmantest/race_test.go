//go:build race

package podmantest_test

// raceEnabled: this binary was built with -race, and so is the docker
// test binary it runs against Podman.
const raceEnabled = true
