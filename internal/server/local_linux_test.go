package server_test

import (
	"testing"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/host"
	"github.com/runbox/runbox/provider/local"
)

// onLocalProvider makes the test server's only provider, and its default,
// a real local provider in the server's home, with a runboxd built from
// this tree.
func onLocalProvider(t *testing.T) serverOpt {
	t.Helper()
	bin, err := providertest.BuildRunboxd()
	if err != nil {
		t.Fatal(err)
	}
	return func(c *serverConfig) {
		home := c.Providers["host"].(*host.Provider).Home
		c.Providers = map[string]runbox.Provider{"local": &local.Provider{Home: home, Runboxd: bin}}
		c.DefaultProvider = "local"
	}
}
