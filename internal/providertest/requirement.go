package providertest

import (
	"fmt"
	"os"
	"testing"
)

// Requirement is what a provider package's tests need from the machine (a
// Docker engine, Linux namespaces), as found once by TestMain.
type Requirement struct {
	pkg, env string
	missing  string // why the machine lacks it; "" when it has it
}

// CheckRequirement runs probe, which returns why this machine cannot run
// pkg's tests ("" when it can). When it cannot and the environment variable
// env is "1" (CI sets it), the test binary fails at once; otherwise every
// test calling Need skips, saying why and naming env.
func CheckRequirement(pkg, env string, probe func() string) *Requirement {
	r := &Requirement{pkg: pkg, env: env, missing: probe()}
	if r.missing != "" && os.Getenv(env) == "1" {
		fmt.Fprintf(os.Stderr, "%s: %s=1 but %s\n", pkg, env, r.missing)
		os.Exit(1)
	}
	return r
}

// Need skips t when the machine lacks the requirement.
func (r *Requirement) Need(t testing.TB) {
	t.Helper()
	if r.missing != "" {
		t.Skipf("%s cannot run here: %s (set %s=1 to make this a failure)", r.pkg, r.missing, r.env)
	}
}
