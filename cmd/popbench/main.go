// Command popbench launches PoPs (memcached shards, mcproxy, edge workers)
// on loopback, drives seeded workloads through them and reports what
// happened. Every subcommand prints tables (or JSON with --json), writes a
// Markdown report and its charts to --out (default out/), and cleans up
// every process it started, also on Ctrl-C. Shards are real memcached when
// installed, else mcproxy's in-process shards (--store picks); mcproxy and
// edge are built from this module with go build.
//
//	popbench demo                      # what `make demo` runs: ~30 s
//	popbench load --rounds 2           # decisions/s, latency by algorithm
//	popbench load --http               # the same through edge processes
//	popbench accuracy --precision 1,4,12,60 --skew 100ms,1s
//	popbench accuracy --trace my-trace.json   # traces: testdata/traces/accuracy-*.json
//	popbench faults                    # shard kill/hang/slow, reload, mcproxy restart
//	popbench pops                      # one client over 3 PoPs
//	popbench central --rtt 80ms        # per-PoP vs central store latency
//	popbench global                    # one limit across 3 PoPs (scope: global)
//	popbench memory                    # bytes per limiter (memcached's stats slabs)
//	popbench memory --limiters 1000000 --algorithm sliding --precision 1
//	popbench proxy --compare           # memcached vs nutcracker vs mcproxy
//	popbench soak --duration 10m       # RSS, goroutines, fds flat at half capacity
//
// Wiring only: the engine is package bench.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/cmd/internal/daemon"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	app := &cli.App{
		Name:     "popbench",
		Version:  daemon.Version(),
		Usage:    "run a whole PoP on loopback, show it working, measure it",
		Commands: commands(),
	}
	if err := app.RunContext(ctx, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "popbench:", err)
		stop()
		os.Exit(1)
	}
}

// commands lists the subcommands (proxy is in proxy.go).
func commands() []*cli.Command {
	return []*cli.Command{demoCommand(), loadCommand(), accuracyCommand(), faultsCommand(),
		popsCommand(), centralCommand(), globalCommand(), memoryCommand(), proxyCommand(), soakCommand(), rlsCommand(), edgeCommand()}
}

// commonFlags are accepted by every subcommand.
func commonFlags(extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{
		&cli.BoolFlag{Name: "json", Usage: "print JSON instead of tables"},
		&cli.StringFlag{Name: "store", Usage: "shards: memcached, embedded (mcproxy's in-process shards), redis (a Redis Cluster of 3 masters + 3 replicas instead of shards and mcproxy) or auto", Value: "auto"},
		&cli.StringFlag{Name: "out", Usage: "directory for reports and charts", Value: "out"},
		&cli.StringFlag{Name: "chart-format", Usage: "charts as png or svg", Value: "png"},
		&cli.BoolFlag{Name: "quiet", Usage: "no status lines or progress bar"},
	}, extra...)
}

func storeKind(c *cli.Context) (bench.StoreKind, error) {
	switch s := c.String("store"); s {
	case "auto", "":
		return bench.StoreAuto, nil
	case "memcached":
		return bench.StoreMemcached, nil
	case "embedded":
		return bench.StoreEmbedded, nil
	case "redis":
		return bench.StoreRedis, nil
	default:
		return "", fmt.Errorf("--store %q: want memcached, embedded, redis or auto", s)
	}
}

// logOut is where status lines and progress go: the app's error writer
// (stderr), or nowhere with --quiet.
func logOut(c *cli.Context) io.Writer {
	if c.Bool("quiet") {
		return io.Discard
	}
	return c.App.ErrWriter
}

func newEnv(c *cli.Context, edge bool) (*bench.Env, error) {
	kind, err := storeKind(c)
	if err != nil {
		return nil, err
	}
	return bench.NewEnv(c.Context, bench.EnvConfig{Edge: edge, Log: logOut(c), Store: kind})
}

// output prints v as JSON with --json, else its tables.
func output(c *cli.Context, v any, tables []*bench.Table) error {
	if c.Bool("json") {
		return writeJSON(c.App.Writer, v)
	}
	for _, t := range tables {
		t.Text(c.App.Writer)
	}
	if s, ok := v.(interface{ WriteSummary(io.Writer) }); ok {
		s.WriteSummary(c.App.Writer)
	}
	return nil
}

// saveReport writes out/<name>.md (titled "popbench <name>": the command
// line, v's tables, charts given relative to out/) and out/<name>.json,
// and says where.
func saveReport(c *cli.Context, name string, v result, charts []string) error {
	dir := c.String("out")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	command := "popbench " + strings.Join(os.Args[1:], " ")
	md := filepath.Join(dir, name+".md")
	if err := writeTablesReport(md, "popbench "+name, command, v.Tables(), charts); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, name+".json"))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := writeJSON(f, v); err != nil {
		return err
	}
	if !c.Bool("json") {
		fmt.Fprintf(c.App.Writer, "\nreport: %s (JSON: %s)\n", md, f.Name())
	}
	return nil
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeTablesReport writes a Markdown report of tables and charts (paths
// relative to the report's directory), headed by the command that made it.
func writeTablesReport(path, title, command string, tables []*bench.Table, charts []string) error {
	rp := &bench.Report{Title: title}
	rp.Para("Command: `%s` — %s.", command, time.Now().UTC().Format(time.RFC3339))
	for _, t := range tables {
		rp.Table(t)
	}
	for _, c := range charts {
		rp.Image(c, c)
	}
	return rp.Write(path)
}
