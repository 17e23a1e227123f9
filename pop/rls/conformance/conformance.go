// Package conformance replays scripted ShouldRateLimit sequences against
// any address that speaks envoy.service.ratelimit.v3 and compares every
// answer with the one the script expects (envoyproxy/ratelimit's
// documented behaviour). The scripts are data (YAML suites: config files,
// global settings, steps), so the same suite checks rls in its tests and
// envoyproxy/ratelimit itself (popbench rls --conformance FILE --target
// ADDR, after --write-config DIR gave it the suite's config files).
package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Suite is one config and the steps run against it.
type Suite struct {
	Name string `yaml:"name"`
	// RLSOnly marks a suite that checks where rls differs from
	// envoyproxy/ratelimit on purpose, or poplimit's extensions: it is not
	// replayed against envoyproxy/ratelimit.
	RLSOnly bool `yaml:"rls_only"`
	// Settings are the service's global settings the suite needs (the
	// server must be started with them).
	Settings Settings `yaml:"settings"`
	// Config maps file names to their YAML. "${RUN}" in it and in the
	// steps is replaced by a token fresh to each replay, so repeated
	// replays never share counts.
	Config map[string]string `yaml:"config"`
	Steps  []Step            `yaml:"steps"`
}

// Settings are envoyproxy/ratelimit's global settings.
type Settings struct {
	Headers       bool `yaml:"headers"`        // LIMIT_RESPONSE_HEADERS_ENABLED
	ShadowMode    bool `yaml:"shadow_mode"`    // SHADOW_MODE
	StopIncrement bool `yaml:"stop_increment"` // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
}

// Env is s as envoyproxy/ratelimit's environment variables.
func (s Settings) Env() []string {
	b := func(v bool) string { return strconv.FormatBool(v) }
	return []string{"LIMIT_RESPONSE_HEADERS_ENABLED=" + b(s.Headers), "SHADOW_MODE=" + b(s.ShadowMode), "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=" + b(s.StopIncrement)}
}

// Step is one request, sent Repeat times (default 1); Want is checked on
// every answer, or on the last only when Repeat > 1 and Last is set.
type Step struct {
	Domain      string `yaml:"domain"`
	Descriptors []Desc `yaml:"descriptors"`
	HitsAddend  uint32 `yaml:"hits_addend"`
	Repeat      int    `yaml:"repeat"`
	Want        Want   `yaml:"want"`
}

// Desc is one request descriptor: entries as "key=value" (the first '='
// splits), and an optional per-descriptor hits_addend (0 = check only).
type Desc struct {
	Entries []string `yaml:"entries"`
	Hits    *uint64  `yaml:"hits"`
}

// Want is the expected answer.
type Want struct {
	// Code is OK or OVER_LIMIT (the overall code), or a gRPC status code
	// name (INVALID_ARGUMENT, UNAVAILABLE) for an error answer.
	Code string `yaml:"code"`
	// Statuses, when given, are compared one by one.
	Statuses []WantStatus `yaml:"statuses"`
	// Headers, when given, are the response_headers_to_add expected (an
	// empty map: none); "reset/UNIT" as a value (reset/minute) means the
	// seconds to the end of that unit's epoch-aligned window.
	Headers map[string]string `yaml:"headers"`
}

// WantStatus is one expected descriptor status.
type WantStatus struct {
	Code string `yaml:"code"`
	// Remaining is limit_remaining; nil leaves it unchecked.
	Remaining *uint32 `yaml:"remaining"`
	// Limit is current_limit as "requests_per_unit/unit" (e.g. 3/minute),
	// or "none" for no current_limit; empty leaves it unchecked. The
	// duration_until_reset of a limit with a unit is checked too: the
	// seconds to the end of the unit's epoch-aligned window.
	Limit string `yaml:"limit"`
	Name  string `yaml:"name"`
	// Reset "any" skips the duration_until_reset check (a token bucket's
	// reset is not the unit's window).
	Reset string `yaml:"reset"`
}

// LoadFile reads the suites of one YAML file (a list of suites).
func LoadFile(path string) ([]Suite, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ss []Suite
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&ss); err != nil {
		return nil, fmt.Errorf("conformance: %s: %w", path, err)
	}
	for i, s := range ss {
		if s.Name == "" || len(s.Config) == 0 || len(s.Steps) == 0 {
			return nil, fmt.Errorf("conformance: %s: suite %d: name, config and steps are required", path, i)
		}
	}
	return ss, nil
}

// NewRun is a fresh token for "${RUN}".
func NewRun() string { return strconv.FormatUint(rand.Uint64()%1e12, 36) }

// WriteConfig writes s's config files, with run substituted, into dir,
// each named "<suite>_<file>" so the suites of one settings group share a
// directory.
func (s Suite) WriteConfig(dir, run string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, body := range s.Config {
		if strings.ContainsAny(name, `/\`) {
			return fmt.Errorf("conformance: suite %s: config file name %q has a path separator", s.Name, name)
		}
		if err := os.WriteFile(filepath.Join(dir, s.Name+"_"+name), []byte(subst(body, run)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func subst(s, run string) string { return strings.ReplaceAll(s, "${RUN}", run) }

// Mismatch is one answer that differs from the script.
type Mismatch struct {
	Suite string
	Step  int // 0-based
	Send  int // 0-based repetition
	What  string
}

func (m Mismatch) String() string {
	return fmt.Sprintf("%s step %d (send %d): %s", m.Suite, m.Step+1, m.Send+1, m.What)
}

// Replay runs s's steps in order on client (whose server loaded s's
// config with run substituted) and returns every mismatch. now is the
// clock the server decides by (time.Now for a real server); a step is
// not sent within 2 s of the end of a minute-unit window, so a sequence
// never straddles one (Replay waits instead, unless now is not real time:
// wait is then false).
func Replay(ctx context.Context, client rlv3.RateLimitServiceClient, s Suite, run string, now func() time.Time, wait bool) ([]Mismatch, error) {
	var out []Mismatch
	if wait {
		// Start well inside a minute: the whole suite then runs in one
		// window of every unit of a minute or more.
		if t := now(); t.Second() >= 50 {
			select {
			case <-time.After(time.Duration(61-t.Second()) * time.Second):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	for i, st := range s.Steps {
		req := st.request(run)
		n := max(st.Repeat, 1)
		for k := range n {
			at := now()
			resp, err := client.ShouldRateLimit(ctx, req)
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			for _, w := range check(st.Want, resp, err, at) {
				out = append(out, Mismatch{Suite: s.Name, Step: i, Send: k, What: w})
			}
		}
	}
	return out, nil
}

func (st Step) request(run string) *rlv3.RateLimitRequest {
	req := &rlv3.RateLimitRequest{Domain: subst(st.Domain, run), HitsAddend: st.HitsAddend}
	for _, d := range st.Descriptors {
		rd := &rlcommon.RateLimitDescriptor{}
		for _, e := range d.Entries {
			k, v, _ := strings.Cut(subst(e, run), "=")
			rd.Entries = append(rd.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		if d.Hits != nil {
			rd.HitsAddend = wrapperspb.UInt64(*d.Hits)
		}
		req.Descriptors = append(req.Descriptors, rd)
	}
	return req
}

// check compares one answer with w; at is when the request was sent.
func check(w Want, resp *rlv3.RateLimitResponse, err error, at time.Time) []string {
	if err != nil {
		got := status.Code(err).String()
		if strings.EqualFold(got, strings.ReplaceAll(w.Code, "_", "")) || codeName(got) == w.Code {
			return nil
		}
		return []string{fmt.Sprintf("error %v, want %s", err, w.Code)}
	}
	if w.Code != "OK" && w.Code != "OVER_LIMIT" {
		return []string{fmt.Sprintf("answer %s, want the error %s", resp.OverallCode, w.Code)}
	}
	var bad []string
	if got := resp.OverallCode.String(); got != w.Code {
		bad = append(bad, fmt.Sprintf("overall %s, want %s", got, w.Code))
	}
	if w.Statuses != nil && len(w.Statuses) != len(resp.Statuses) {
		return append(bad, fmt.Sprintf("%d statuses, want %d", len(resp.Statuses), len(w.Statuses)))
	}
	for j, ws := range w.Statuses {
		bad = append(bad, checkStatus(j, ws, resp.Statuses[j], at)...)
	}
	if w.Headers != nil {
		bad = append(bad, checkHeaders(w.Headers, resp, at)...)
	}
	return bad
}

// codeName turns gRPC's "InvalidArgument" into "INVALID_ARGUMENT".
func codeName(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

var unitSeconds = map[string]int64{"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800, "month": 2592000, "year": 31536000}

// resetOK reports whether got seconds is the time to the end of the
// epoch-aligned window of sec seconds at at (one second of slack for the
// request's flight).
func resetOK(got, sec int64, at time.Time) bool {
	want := sec - at.Unix()%sec
	return got == want || got == want-1
}

func checkStatus(j int, ws WantStatus, st *rlv3.RateLimitResponse_DescriptorStatus, at time.Time) []string {
	var bad []string
	if got := st.Code.String(); got != ws.Code {
		bad = append(bad, fmt.Sprintf("status %d: code %s, want %s", j, got, ws.Code))
	}
	if ws.Remaining != nil && st.LimitRemaining != *ws.Remaining {
		bad = append(bad, fmt.Sprintf("status %d: remaining %d, want %d", j, st.LimitRemaining, *ws.Remaining))
	}
	cl := st.CurrentLimit
	switch {
	case ws.Limit == "":
	case ws.Limit == "none":
		if cl != nil {
			bad = append(bad, fmt.Sprintf("status %d: current_limit %v, want none", j, cl))
		}
	case cl == nil:
		bad = append(bad, fmt.Sprintf("status %d: no current_limit, want %s", j, ws.Limit))
	default:
		unit := strings.ToLower(cl.Unit.String())
		if got := fmt.Sprintf("%d/%s", cl.RequestsPerUnit, unit); got != ws.Limit {
			bad = append(bad, fmt.Sprintf("status %d: current_limit %s, want %s", j, got, ws.Limit))
		}
		if ws.Name != "" && cl.Name != ws.Name {
			bad = append(bad, fmt.Sprintf("status %d: current_limit name %q, want %q", j, cl.Name, ws.Name))
		}
		if sec, ok := unitSeconds[unit]; ok && ws.Reset != "any" {
			if d := st.DurationUntilReset; d == nil || d.Nanos != 0 || !resetOK(d.Seconds, sec, at) {
				bad = append(bad, fmt.Sprintf("status %d: duration_until_reset %v, want %ds", j, d.AsDuration(), sec-at.Unix()%sec))
			}
		}
	}
	return bad
}

func checkHeaders(want map[string]string, resp *rlv3.RateLimitResponse, at time.Time) []string {
	got := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	var bad []string
	if len(got) != len(want) {
		bad = append(bad, fmt.Sprintf("headers %v, want %v", got, want))
	}
	for k, v := range want {
		g, ok := got[k]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("header %s missing", k))
		case strings.HasPrefix(v, "reset/"):
			sec := unitSeconds[strings.TrimPrefix(v, "reset/")]
			n, err := strconv.ParseInt(g, 10, 64)
			if err != nil || sec == 0 || !resetOK(n, sec, at) {
				bad = append(bad, fmt.Sprintf("header %s: %q, want the seconds to the end of the %s", k, g, v))
			}
		case g != v:
			bad = append(bad, fmt.Sprintf("header %s: %q, want %q", k, g, v))
		}
	}
	return bad
}
