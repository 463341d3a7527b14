package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox/internal/endpoint"
)

// streamDialer is a provider whose sandboxes have a persistent endpoint
// (ssh, kubernetes): how the endpoint reaches a sandbox's runboxd anew for
// each connection, and whether the sandbox is gone.
type streamDialer interface {
	StreamDialer(id string) (dial func(ctx context.Context) (net.Conn, error), gone func() bool, err error)
}

// endpointCmd is `runbox-full endpoint PROVIDER ID`, hidden: the
// persistent endpoint of a remote sandbox (package internal/endpoint),
// which the front starts detached on first use with a pipe on descriptor
// 3 to hear that it listens. ssh and kubernetes sandboxes have one (their
// providers are streamDialers).
func (a *app) endpointCmd() *cobra.Command {
	var idle time.Duration
	c := &cobra.Command{
		Use:    "endpoint PROVIDER ID",
		Short:  "Serve a remote sandbox's persistent endpoint on this machine (started by runbox itself)",
		Hidden: true,
		Args:   exactArgs(2, "a provider and a sandbox id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			provider, id := args[0], args[1]
			if !cmd.Flags().Changed("idle") {
				d, err := endpoint.Idle()
				if err != nil {
					return err
				}
				idle = d
			}
			ready := os.NewFile(3, "ready")
			var sd streamDialer
			if ready != nil {
				if p, err := a.localProvider(provider); err == nil {
					sd, _ = p.(streamDialer)
				}
			}
			if sd == nil {
				if ready != nil {
					fmt.Fprintf(ready, "no endpoint for provider %q\n", provider)
					ready.Close()
				}
				return fmt.Errorf("endpoint: no endpoint for provider %q (only ssh and kubernetes)", provider)
			}
			dial, gone, err := sd.StreamDialer(id)
			if err == nil {
				var sock string
				if sock, err = endpoint.Socket(a.env.Home, provider, id); err == nil {
					s := &endpoint.Server{Socket: sock, Idle: idle, Dial: dial, Gone: gone, Ready: ready}
					err = s.Serve()
					if gone() {
						endpoint.Forget(a.env.Home, provider, id) // the sandbox is removed
					}
					return err
				}
			}
			fmt.Fprintln(ready, err)
			ready.Close()
			return err
		},
	}
	c.Flags().DurationVar(&idle, "idle", endpoint.DefaultIdle, "exit after this long without a connection (default $"+endpoint.IdleEnv+", else 10m)")
	return c
}
