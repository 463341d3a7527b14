package servercli

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox/internal/registry"
)

// tokenCmd is runbox token, which manages runbox serve's bearer tokens
// with its create, list and revoke subcommands.
func (a *app) tokenCmd() *cobra.Command {
	var db string
	c := &cobra.Command{
		Use:   "token",
		Short: "Create, list and revoke runbox serve's bearer tokens",
		Long: `Manage the bearer tokens of runbox serve, in its registry database (--db,
default $RUNBOX_HOME/runbox.db; the server need not be stopped). Only a
SHA-256 of each token is stored: a token is shown once, when created.`,
		Args: exactArgs(0, "a subcommand: create, list or revoke"),
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	c.PersistentFlags().StringVar(&db, "db", "", "the registry database (default $RUNBOX_HOME/runbox.db)")
	c.AddCommand(a.tokenCreateCmd(&db), a.tokenListCmd(&db), a.tokenRevokeCmd(&db))
	return c
}

// tokenCreateCmd is runbox token create, which makes a token for a tenant
// in the database at *db, sets the tenant's quotas it is given, and prints
// the token.
func (a *app) tokenCreateCmd(db *string) *cobra.Command {
	var tenant string
	var maxSandboxes, maxExecs int
	create := &cobra.Command{
		Use:   "create --tenant NAME [--max-sandboxes N] [--max-execs N]",
		Short: "Make a token for a tenant (created if new) and print it",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, _ []string) error {
			if tenant == "" {
				return fmt.Errorf("token create: --tenant is required")
			}
			store, err := registry.Open(c.Context(), a.dbPath(*db))
			if err != nil {
				return fmt.Errorf("token create: %w", err)
			}
			defer store.Close()
			tok, secret, err := store.CreateToken(c.Context(), tenant)
			if err != nil {
				return fmt.Errorf("token create: %w", err)
			}
			if c.Flags().Changed("max-sandboxes") || c.Flags().Changed("max-execs") {
				if !c.Flags().Changed("max-sandboxes") {
					maxSandboxes = -1
				}
				if !c.Flags().Changed("max-execs") {
					maxExecs = -1
				}
				if err := store.SetQuotas(c.Context(), tenant, maxSandboxes, maxExecs); err != nil {
					return fmt.Errorf("token create: %w", err)
				}
			}
			fmt.Fprintln(a.stdout, secret)
			fmt.Fprintf(a.stderr, "runbox: token %s for tenant %s (shown once; revoke with runbox token revoke %s)\n", tok.ID, tenant, tok.ID)
			return nil
		},
	}
	create.Flags().StringVar(&tenant, "tenant", "", "the tenant the token acts for")
	create.Flags().IntVar(&maxSandboxes, "max-sandboxes", 0, "set the tenant's sandbox limit (0: the server's default)")
	create.Flags().IntVar(&maxExecs, "max-execs", 0, "set the tenant's limit of running execs (0: the server's default)")
	return create
}

// tokenListCmd is runbox token list, which prints a table of the tokens in
// the database at *db, all tenants' or one's.
func (a *app) tokenListCmd(db *string) *cobra.Command {
	var listTenant string
	list := &cobra.Command{
		Use:   "list [--tenant NAME]",
		Short: "List tokens (ids, tenants, creation, revocation)",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, _ []string) error {
			store, err := registry.Open(c.Context(), a.dbPath(*db))
			if err != nil {
				return fmt.Errorf("token list: %w", err)
			}
			defer store.Close()
			toks, err := store.ListTokens(c.Context(), listTenant)
			if err != nil {
				return fmt.Errorf("token list: %w", err)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOKEN ID\tTENANT\tCREATED\tREVOKED")
			for _, t := range toks {
				revoked := "-"
				if !t.Revoked.IsZero() {
					revoked = t.Revoked.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.ID, t.Tenant, t.Created.UTC().Format(time.RFC3339), revoked)
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVar(&listTenant, "tenant", "", "only this tenant's tokens")
	return list
}

// tokenRevokeCmd is runbox token revoke, which revokes tokens in the
// database at *db by id, printing each id as it is revoked.
func (a *app) tokenRevokeCmd(db *string) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke TOKEN_ID...",
		Short: "Revoke tokens: calls with them fail as unauthenticated at once",
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("%s: expected at least one TOKEN_ID (see '%s --help')", c.Name(), c.CommandPath())
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			store, err := registry.Open(c.Context(), a.dbPath(*db))
			if err != nil {
				return fmt.Errorf("token revoke: %w", err)
			}
			defer store.Close()
			for _, id := range args {
				err := store.RevokeToken(c.Context(), id)
				if errors.Is(err, registry.ErrNotFound) {
					return fmt.Errorf("token revoke: no token %s (runbox token list shows them)", id)
				}
				if err != nil {
					return fmt.Errorf("token revoke: %w", err)
				}
				fmt.Fprintln(a.stdout, id)
			}
			return nil
		},
	}
}
