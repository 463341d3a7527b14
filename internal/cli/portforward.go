package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox/internal/egress"
)

func (a *app) portForwardCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "port-forward SANDBOX [LOCAL:]REMOTE",
		Short: "Reach a port on a sandbox's loopback from this machine's",
		Long: `Listen on 127.0.0.1:LOCAL (default: a free port), print that address on one
line, and carry every connection to it to 127.0.0.1:REMOTE inside the sandbox,
over runbox's own channel to its runboxd, until interrupted. It reaches a
server in a --network private or none sandbox, which nothing else can.`,
		Args: exactArgs(2, "SANDBOX [LOCAL:]REMOTE"),
		RunE: func(c *cobra.Command, args []string) error {
			key := args[0]
			local, remote, err := parsePortPair(args[1])
			if err != nil {
				return fail("port-forward", key, "", err)
			}
			p, sb, err := a.find(c.Context(), key)
			if err != nil {
				return fail("port-forward", key, "", err)
			}
			if _, ok := p.(*remoteProvider); ok {
				return fail("port-forward", key, "", fmt.Errorf("%w: port-forward through runbox serve", errors.ErrUnsupported))
			}
			// Where the provider says runboxd is behind a unix socket on
			// this kernel (local, host, docker with its socket here), it
			// passes the connected socket and the kernel splices it;
			// elsewhere (docker's exec stream, ssh, kubernetes) the bytes
			// travel in ForwardService messages.
			ports := egress.NewPorts(p.Dialer(sb), egress.PassesFDs(p, sb))
			defer ports.Close()
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(local)))
			if err != nil {
				return fail("port-forward", key, "", err)
			}
			ctx, cancel := context.WithCancel(c.Context())
			defer cancel()
			stop := context.AfterFunc(ctx, func() { ln.Close() })
			defer stop()
			fmt.Fprintln(a.stdout, ln.Addr().String())
			var wg sync.WaitGroup
			defer wg.Wait()
			for {
				conn, err := ln.Accept()
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return fail("port-forward", key, "", err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := ports.Forward(ctx, remote, conn); err != nil {
						fmt.Fprintf(a.stderr, "runbox: port-forward: %v\n", err)
					}
				}()
			}
		},
	}
}

// parsePortPair parses REMOTE or LOCAL:REMOTE (LOCAL 0: a free port).
func parsePortPair(s string) (local, remote int, err error) {
	l, r, ok := strings.Cut(s, ":")
	if !ok {
		l, r = "0", s
	}
	local, err1 := strconv.Atoi(l)
	remote, err2 := strconv.Atoi(r)
	if err1 != nil || err2 != nil || local < 0 || local > 65535 || remote < 1 || remote > 65535 {
		return 0, 0, fmt.Errorf("%q: want REMOTE or LOCAL:REMOTE, ports 1-65535 (LOCAL 0: any free port)", s)
	}
	return local, remote, nil
}
