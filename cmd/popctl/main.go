// Command popctl is the operator's tool for the PostgreSQL policy source
// (pop/pgpolicy): schema migrations and the tiers and API keys edge
// workers enforce. Every command is one transaction; workers apply a
// change within about a second (NOTIFY).
//
//	popctl --dsn postgres://... migrate
//	popctl tiers
//	popctl set-tier --tier pro --route "GET /api/" --window 60 --max 1000 [--burst N] [--fail-mode open] [--algorithm token_bucket] [--anonymous]
//	popctl issue-key --tier pro [--tenant UUID] KEY
//	popctl revoke-key KEY
//
// The DSN may come from POPLIMIT_PG_DSN instead of --dsn. It is a separate
// binary, not an edge subcommand, so that the workers (which only read)
// never carry the write path.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/cmd/internal/daemon"
	"github.com/poplimit/poplimit/pop/pgpolicy"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "popctl:", err)
		os.Exit(1)
	}
}

// timeout bounds one command: connect, transaction and all.
const timeout = 30 * time.Second

// run is popctl with args (without the program name), writing to out.
func run(ctx context.Context, args []string, out io.Writer) error {
	app := newApp(out)
	return app.RunContext(ctx, append([]string{"popctl"}, args...))
}

func newApp(out io.Writer) *cli.App {
	return &cli.App{
		Name:    "popctl",
		Version: daemon.Version(),
		Usage:   "manage the PostgreSQL policy source of edge workers (tiers, API keys, schema)",
		Description: "Each command is one transaction; workers on --policy-source apply it within about a second\n" +
			"(LISTEN/NOTIFY). Keys are stored as SHA-256 digests, never in clear.",
		Writer:          out,
		HideHelpCommand: true,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("unknown command %q (popctl --help lists them)", c.Args().First())
			}
			return cli.ShowAppHelp(c)
		},
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dsn", EnvVars: []string{"POPLIMIT_PG_DSN"}, Usage: "PostgreSQL connection `URL`"},
		},
		Commands: []*cli.Command{
			{Name: "migrate", Usage: "apply the embedded schema migrations not applied yet (idempotent)", Action: withPool(migrate)},
			{Name: "tiers", Usage: "list the tiers", Action: withPool(listTiers)},
			{Name: "set-tier", Usage: "create or replace a tier's row (validated as the workers will)", Flags: tierFlags(), Action: withPool(setTier)},
			{Name: "issue-key", Usage: "issue an API key on a tier", ArgsUsage: "KEY", Flags: []cli.Flag{
				&cli.StringFlag{Name: "tier", Required: true, Usage: "tier of the key"},
				&cli.StringFlag{Name: "tenant", Usage: "tenant `UUID`"},
			}, Action: withPool(issueKey)},
			{Name: "revoke-key", Usage: "revoke an API key (403 on every worker)", ArgsUsage: "KEY", Action: withPool(revokeKey)},
		},
	}
}

// withPool connects to --dsn for the duration of one command.
func withPool(f func(context.Context, *cli.Context, *pgxpool.Pool) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		dsn := c.String("dsn")
		if dsn == "" {
			return errors.New("no database: give --dsn or POPLIMIT_PG_DSN")
		}
		ctx, cancel := context.WithTimeout(c.Context, timeout)
		defer cancel()
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			return err
		}
		defer pool.Close()
		return f(ctx, c, pool)
	}
}

func migrate(ctx context.Context, c *cli.Context, pool *pgxpool.Pool) error {
	applied, err := pgpolicy.Migrate(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "applied %d migration(s) %v\n", len(applied), applied)
	return nil
}

func listTiers(ctx context.Context, c *cli.Context, pool *pgxpool.Pool) error {
	ts, err := pgpolicy.ListTiers(ctx, pool)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(c.App.Writer, 2, 8, 2, ' ', 0)
	fmt.Fprintln(w, "TIER\tROUTE\tALGORITHM\tMAX\tWINDOW_S\tBURST\tFAIL\tANON\tEXTRA")
	for _, t := range ts {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%v\t%d\n", t.TierName, t.RoutePattern, t.Algorithm, t.MaxRequests, t.WindowSeconds, t.BurstCapacity, t.FailMode, t.IsAnonymous, len(t.Extra))
	}
	return w.Flush()
}

func tierFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "tier", Required: true, Usage: "tier name"},
		&cli.StringFlag{Name: "route", Required: true, Usage: `route pattern, e.g. "GET /api/"`},
		&cli.Int64Flag{Name: "window", Value: 60, Usage: "window, seconds"},
		&cli.Int64Flag{Name: "max", Required: true, Usage: "requests per window"},
		&cli.Int64Flag{Name: "burst", Usage: "token bucket capacity (0: --max)"},
		&cli.StringFlag{Name: "fail-mode", Value: "open", Usage: "open, closed or local"},
		&cli.StringFlag{Name: "algorithm", Value: "sliding_window", Usage: "sliding_window, fixed_window or token_bucket"},
		&cli.StringFlag{Name: "on-reject", Value: "count", Usage: "count or refund"},
		&cli.StringFlag{Name: "scope", Value: "api_key", Usage: "identity parts, comma-separated: ip, api_key, tenant, user, route"},
		&cli.Int64Flag{Name: "precision", Usage: "sliding window sub-windows"},
		&cli.BoolFlag{Name: "anonymous", Usage: "the tier of requests with no or an unknown key"},
	}
}

func setTier(ctx context.Context, c *cli.Context, pool *pgxpool.Pool) error {
	t := pgpolicy.TierRow{
		TierName: c.String("tier"), RoutePattern: c.String("route"), WindowSeconds: c.Int64("window"),
		MaxRequests: c.Int64("max"), BurstCapacity: c.Int64("burst"), FailMode: c.String("fail-mode"),
		Algorithm: c.String("algorithm"), OnReject: c.String("on-reject"), Scope: c.String("scope"),
		Precision: c.Int64("precision"), IsAnonymous: c.Bool("anonymous"),
	}
	if t.MaxRequests <= 0 {
		return errors.New("set-tier: --max must be positive")
	}
	if err := pgpolicy.SetTier(ctx, pool, t); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "tier %s set\n", t.TierName)
	return nil
}

// oneKey is the KEY argument of issue-key and revoke-key.
func oneKey(c *cli.Context) (string, error) {
	if c.NArg() != 1 {
		return "", fmt.Errorf("%s: exactly one KEY argument, got %d", c.Command.Name, c.NArg())
	}
	return c.Args().First(), nil
}

func issueKey(ctx context.Context, c *cli.Context, pool *pgxpool.Pool) error {
	k, err := oneKey(c)
	if err != nil {
		return err
	}
	if err := pgpolicy.IssueKey(ctx, pool, k, c.String("tenant"), c.String("tier")); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "key issued on tier %s\n", c.String("tier"))
	return nil
}

func revokeKey(ctx context.Context, c *cli.Context, pool *pgxpool.Pool) error {
	k, err := oneKey(c)
	if err != nil {
		return err
	}
	if err := pgpolicy.SetKeyActive(ctx, pool, k, false); err != nil {
		return err
	}
	fmt.Fprintln(c.App.Writer, "key revoked")
	return nil
}
