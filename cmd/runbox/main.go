// Command runbox is the runbox command line that agents and people call:
// a small front that runs `runbox exec` on a host or local sandbox by id
// (and `runbox version`) itself, and hands everything else, with the same
// arguments, to runbox-full beside it (serve, mcp, token, audit and man
// to runbox-server); see internal/front.
package main

import (
	"os"

	"github.com/runbox/runbox/internal/fdsweep"
	"github.com/runbox/runbox/internal/front"
)

func main() {
	// Nothing this process inherited beyond stdio goes on to runbox-full,
	// runboxd or anything they start (security rule 3).
	_ = fdsweep.CloexecFrom(3)
	os.Exit(front.Main(os.Args[1:]))
}
