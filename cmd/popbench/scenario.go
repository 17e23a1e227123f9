package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/counter"
)

// result is what every scenario of package bench returns: a value printed
// as JSON with --json, else as its tables.
type result interface{ Tables() []*bench.Table }

// runScenario is the shape every subcommand shares: launch an environment
// (edge: edge worker processes may be started), draw a progress bar
// labelled what, run, print the result (JSON or tables). The environment and
// every process it started are gone when it returns.
func runScenario[R result](c *cli.Context, edge bool, what string, run func(env *bench.Env, prog func(done, total int)) (R, error)) (R, error) {
	var zero R
	env, err := newEnv(c, edge)
	if err != nil {
		return zero, err
	}
	defer env.Close()
	prog, done := progress(c, what)
	res, err := run(env, prog)
	done()
	if err != nil {
		return zero, err
	}
	return res, output(c, res, res.Tables())
}

// seedFlag is the workload seed every seeded subcommand takes.
func seedFlag() cli.Flag {
	return &cli.Uint64Flag{Name: "seed", Usage: "workload seed", Value: 1}
}

// inprocessFlag picks in-process workers over edge processes.
func inprocessFlag() cli.Flag {
	return &cli.BoolFlag{Name: "inprocess", Usage: "in-process workers instead of edge processes"}
}

// algorithms parses a comma-separated list of algorithm names.
func algorithms(s string) ([]counter.Algorithm, error) {
	var algs []counter.Algorithm
	for _, f := range list(s) {
		a, err := bench.ParseAlgorithm(f)
		if err != nil {
			return nil, err
		}
		algs = append(algs, a)
	}
	return algs, nil
}

// durations parses a comma-separated list of durations.
func durations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range list(s) {
		d, err := time.ParseDuration(f)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// list splits a comma-separated flag value, dropping empty fields.
func list(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// intList parses a comma-separated list of integers.
func intList(s string) ([]int, error) {
	var out []int
	for _, f := range list(s) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", f, err)
		}
		out = append(out, n)
	}
	return out, nil
}
