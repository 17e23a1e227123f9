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
// never carry the write path, and operators run it from wherever they
// hold write credentials.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/poplimit/poplimit/pop/pgpolicy"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "popctl:", err)
		os.Exit(1)
	}
}

var errUsage = errors.New("usage: popctl [--dsn DSN] migrate | tiers | set-tier FLAGS | issue-key --tier T [--tenant UUID] KEY | revoke-key KEY")

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("popctl", flag.ContinueOnError)
	dsn := fs.String("dsn", os.Getenv("POPLIMIT_PG_DSN"), "PostgreSQL connection string (default $POPLIMIT_PG_DSN)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 || *dsn == "" {
		return errUsage
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	switch cmd {
	case "migrate":
		applied, err := pgpolicy.Migrate(ctx, pool)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "applied %d migration(s) %v\n", len(applied), applied)
		return nil
	case "tiers":
		return listTiers(ctx, pool, out)
	case "set-tier":
		return setTier(ctx, pool, rest, out)
	case "issue-key", "revoke-key":
		return key(ctx, pool, cmd, rest, out)
	}
	return errUsage
}

func listTiers(ctx context.Context, pool *pgxpool.Pool, out io.Writer) error {
	ts, err := pgpolicy.ListTiers(ctx, pool)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(w, "TIER\tROUTE\tALGORITHM\tMAX\tWINDOW_S\tBURST\tFAIL\tANON\tEXTRA")
	for _, t := range ts {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%v\t%d\n", t.TierName, t.RoutePattern, t.Algorithm, t.MaxRequests, t.WindowSeconds, t.BurstCapacity, t.FailMode, t.IsAnonymous, len(t.Extra))
	}
	return w.Flush()
}

func setTier(ctx context.Context, pool *pgxpool.Pool, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("set-tier", flag.ContinueOnError)
	var t pgpolicy.TierRow
	fs.StringVar(&t.TierName, "tier", "", "tier name (required)")
	fs.StringVar(&t.RoutePattern, "route", "", `route pattern, e.g. "GET /api/" (required)`)
	fs.Int64Var(&t.WindowSeconds, "window", 60, "window, seconds")
	fs.Int64Var(&t.MaxRequests, "max", 0, "requests per window (required)")
	fs.Int64Var(&t.BurstCapacity, "burst", 0, "token bucket capacity (0: max)")
	fs.StringVar(&t.FailMode, "fail-mode", "open", "open, closed or local")
	fs.StringVar(&t.Algorithm, "algorithm", "sliding_window", "sliding_window, fixed_window or token_bucket")
	fs.StringVar(&t.OnReject, "on-reject", "count", "count or refund")
	fs.StringVar(&t.Scope, "scope", "api_key", "identity parts, comma-separated: ip, api_key, tenant, user, route")
	fs.Int64Var(&t.Precision, "precision", 0, "sliding window sub-windows")
	fs.BoolVar(&t.IsAnonymous, "anonymous", false, "the tier of requests with no or an unknown key")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if t.TierName == "" || t.RoutePattern == "" || t.MaxRequests == 0 {
		return errors.New("set-tier: --tier, --route and --max are required")
	}
	if err := pgpolicy.SetTier(ctx, pool, t); err != nil {
		return err
	}
	fmt.Fprintf(out, "tier %s set\n", t.TierName)
	return nil
}

func key(ctx context.Context, pool *pgxpool.Pool, cmd string, args []string, out io.Writer) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	tier := fs.String("tier", "", "tier of the key (issue-key, required)")
	tenant := fs.String("tenant", "", "tenant UUID (issue-key)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errUsage
	}
	k := fs.Arg(0)
	if cmd == "revoke-key" {
		if err := pgpolicy.SetKeyActive(ctx, pool, k, false); err != nil {
			return err
		}
		fmt.Fprintln(out, "key revoked")
		return nil
	}
	if *tier == "" {
		return errors.New("issue-key: --tier is required")
	}
	if err := pgpolicy.IssueKey(ctx, pool, k, *tenant, *tier); err != nil {
		return err
	}
	fmt.Fprintf(out, "key issued on tier %s\n", *tier)
	return nil
}
