package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// egressHoster is a provider whose private sandboxes' host side is a
// process of its own on the machine that created them (kubernetes).
type egressHoster interface {
	ServeEgress(ctx context.Context, id string, log *slog.Logger) error
}

// egressHostCmd is `runbox-full egress-host PROVIDER ID`, hidden: the host
// side of a private sandbox's egress, which the provider starts detached
// when it creates the sandbox, and which exits when the sandbox is gone
// (provider/kubernetes egress.go).
func (a *app) egressHostCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "egress-host PROVIDER ID",
		Short:  "Carry a private sandbox's egress on this machine (started by runbox itself)",
		Hidden: true,
		Args:   exactArgs(2, "a provider and a sandbox id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.localProvider(args[0])
			if err != nil {
				return fmt.Errorf("egress-host: %w", err)
			}
			h, ok := p.(egressHoster)
			if !ok {
				return fmt.Errorf("egress-host: provider %s has no host side of its own", args[0])
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return h.ServeEgress(ctx, args[1], slog.New(slog.NewTextHandler(a.stderr, nil)))
		},
	}
}
