package host_test

import (
	"testing"

	"github.com/runbox/runbox/internal/providertest"
)

// TestMain builds runboxd once for every test and benchmark here, exports it
// as $RUNBOX_RUNBOXD, and fails the run if a goroutine leaked.
func TestMain(m *testing.M) { providertest.Main(m) }
