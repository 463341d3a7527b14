// Command runbox-server is the runbox command line with the commands of
// the control plane and its tools (serve, mcp, token, audit, man) besides
// every provider and command of runbox-full: runbox and runbox-full hand
// those commands to it (package handover), so that they alone pay the
// package inits of a server, Prometheus, SQLite, the MCP SDK and a man page
// generator. It can also be called directly. See internal/cli/servercli.
package main

import (
	"github.com/runbox/runbox/internal/cli/servercli"
	"github.com/runbox/runbox/internal/handover"
)

func main() { handover.Main(servercli.Main) }
