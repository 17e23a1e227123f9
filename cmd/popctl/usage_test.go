package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestHelpListsEveryCommandAndFlag: popctl's help is urfave/cli's, and each
// command's help lists its own flags.
func TestHelpListsEveryCommandAndFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"USAGE:", "migrate", "tiers", "set-tier", "issue-key", "revoke-key", "--dsn", "POPLIMIT_PG_DSN", "--version"}},
		{[]string{"set-tier", "--help"}, []string{"--tier", "--route", "--window", "--max", "--burst", "--fail-mode", "--algorithm", "--on-reject", "--scope", "--precision", "--anonymous"}},
		{[]string{"issue-key", "--help"}, []string{"--tier", "--tenant", "KEY"}},
		{[]string{"--version"}, []string{"popctl version "}},
	} {
		var out bytes.Buffer
		if err := run(context.Background(), tc.args, &out); err != nil {
			t.Fatalf("popctl %v: %v", tc.args, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("popctl %v does not print %q:\n%s", tc.args, w, out.String())
			}
		}
	}
}

// TestUsageErrorsSayWhatIsMissing: no database, a missing required flag and
// a missing KEY are errors that name what is missing, before any query.
func TestUsageErrorsSayWhatIsMissing(t *testing.T) {
	t.Setenv("POPLIMIT_PG_DSN", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tiers"}, "--dsn or POPLIMIT_PG_DSN"},
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"--dsn", "postgres://127.0.0.1:1/x", "set-tier", "--tier", "free"}, `"route, max" not set`},
		{[]string{"--dsn", "postgres://127.0.0.1:1/x", "revoke-key"}, "exactly one KEY argument, got 0"},
		{[]string{"--dsn", "postgres://127.0.0.1:1/x", "issue-key", "--tier", "pro", "a", "b"}, "exactly one KEY argument, got 2"},
		{[]string{"--dsn", "postgres://127.0.0.1:1/x", "set-tier", "--tier", "free", "--route", "GET /", "--max", "-1"}, "--max must be positive"},
	} {
		var out bytes.Buffer
		err := run(context.Background(), tc.args, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("popctl %v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}
