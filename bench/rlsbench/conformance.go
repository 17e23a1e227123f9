package rlsbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/poplimit/poplimit/pop/rls/conformance"
)

// ConformanceConfig configures Conformance.
type ConformanceConfig struct {
	// File holds the suites; required.
	File string
	// Suites selects suites by name; none: every suite.
	Suites []string
	// PeerSuites skips the rls_only suites (rls's deliberate differences
	// and extensions).
	PeerSuites bool
	// Run is the ${RUN} token; default a fresh one.
	Run string
	// WriteConfig, when not "", is the directory the selected suites'
	// config files are written into (their settings printed) instead of
	// replaying.
	WriteConfig string
	// Target is the gRPC address replayed against (the server must have
	// loaded the suites' config with the same Run token and settings).
	Target string
}

// Conformance replays the selected suites against cfg.Target, printing
// each suite's mismatches to w, and fails when any answer differs; with
// cfg.WriteConfig it writes their config files instead.
func Conformance(ctx context.Context, cfg ConformanceConfig, w io.Writer) error {
	suites, err := selectedSuites(cfg)
	if err != nil {
		return err
	}
	run := cfg.Run
	if run == "" {
		run = conformance.NewRun()
	}
	if dir := cfg.WriteConfig; dir != "" {
		for _, s := range suites {
			if err := s.WriteConfig(dir, run); err != nil {
				return err
			}
			fmt.Fprintf(w, "suite %s: %s\n", s.Name, strings.Join(s.Settings.Env(), " "))
		}
		fmt.Fprintf(w, "run token %s; config in %s\n", run, dir)
		return nil
	}
	if cfg.Target == "" {
		return errors.New("--conformance needs one --target (or --write-config)")
	}
	cc, err := grpc.NewClient(cfg.Target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	client := rlv3.NewRateLimitServiceClient(cc)
	failed := 0
	for _, s := range suites {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		bad, err := conformance.Replay(sctx, client, s, run, time.Now, true)
		cancel()
		if err != nil {
			return fmt.Errorf("suite %s: %w", s.Name, err)
		}
		steps := 0
		for _, st := range s.Steps {
			steps += max(st.Repeat, 1)
		}
		fmt.Fprintf(w, "%-32s %3d answers, %d mismatches\n", s.Name, steps, len(bad))
		for _, m := range bad {
			fmt.Fprintln(w, "  ", m)
		}
		failed += len(bad)
	}
	if failed > 0 {
		return fmt.Errorf("%d answers differ from the suites", failed)
	}
	return nil
}

// selectedSuites are the suites of cfg.File that cfg.Suites and
// cfg.PeerSuites select.
func selectedSuites(cfg ConformanceConfig) ([]conformance.Suite, error) {
	all, err := conformance.LoadFile(cfg.File)
	if err != nil {
		return nil, err
	}
	var out []conformance.Suite
	for _, s := range all {
		if (len(cfg.Suites) > 0 && !slices.Contains(cfg.Suites, s.Name)) || (cfg.PeerSuites && s.RLSOnly) {
			continue
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, errors.New("no suite selected")
	}
	return out, nil
}
