package differential

import (
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/poplimit/poplimit/pop/rls"
)

// oneAnswer is an answer whose one descriptor has code, remaining, a
// limit of rpu per minute and reset.
func oneAnswer(code rlv3.RateLimitResponse_Code, remaining, rpu uint32, reset time.Duration) answer {
	return answer{Resp: &rlv3.RateLimitResponse{OverallCode: code, Statuses: []*rlv3.RateLimitResponse_DescriptorStatus{{
		Code: code, LimitRemaining: remaining, DurationUntilReset: durationpb.New(reset),
		CurrentLimit: &rlv3.RateLimitResponse_RateLimit{Name: "n", RequestsPerUnit: rpu, Unit: rlv3.RateLimitResponse_RateLimit_MINUTE},
	}}}}
}

func TestCompareFlagsTheOneFieldThatDiffers(t *testing.T) {
	base := oneAnswer(rlv3.RateLimitResponse_OK, 3, 5, 30*time.Second)
	tests := []struct {
		name   string
		change func(*rlv3.RateLimitResponse)
		want   []string // fields flagged, "" for none
	}{
		{"equal", func(*rlv3.RateLimitResponse) {}, nil},
		{"overall code", func(r *rlv3.RateLimitResponse) { r.OverallCode = rlv3.RateLimitResponse_OVER_LIMIT }, []string{"overall_code"}},
		{"descriptor code", func(r *rlv3.RateLimitResponse) { r.Statuses[0].Code = rlv3.RateLimitResponse_OVER_LIMIT }, []string{"code"}},
		{"limit remaining", func(r *rlv3.RateLimitResponse) { r.Statuses[0].LimitRemaining = 2 }, []string{"limit_remaining"}},
		{"limit name", func(r *rlv3.RateLimitResponse) { r.Statuses[0].CurrentLimit.Name = "m" }, []string{"current_limit"}},
		{"requests per unit", func(r *rlv3.RateLimitResponse) { r.Statuses[0].CurrentLimit.RequestsPerUnit = 6 }, []string{"current_limit"}},
		{"unit", func(r *rlv3.RateLimitResponse) {
			r.Statuses[0].CurrentLimit.Unit = rlv3.RateLimitResponse_RateLimit_HOUR
		}, []string{"current_limit"}},
		{"no limit", func(r *rlv3.RateLimitResponse) { r.Statuses[0].CurrentLimit = nil }, []string{"current_limit"}},
		{"reset within a second", func(r *rlv3.RateLimitResponse) { r.Statuses[0].DurationUntilReset = durationpb.New(31 * time.Second) }, nil},
		{"reset two seconds off", func(r *rlv3.RateLimitResponse) { r.Statuses[0].DurationUntilReset = durationpb.New(32 * time.Second) }, []string{"duration_until_reset"}},
		{"no reset", func(r *rlv3.RateLimitResponse) { r.Statuses[0].DurationUntilReset = nil }, []string{"duration_until_reset"}},
		{"one more status", func(r *rlv3.RateLimitResponse) { r.Statuses = append(r.Statuses, r.Statuses[0]) }, []string{"statuses"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			peer := answer{Resp: proto.Clone(base.Resp).(*rlv3.RateLimitResponse)}
			tt.change(peer.Resp)
			var got []string
			for _, d := range compare(base, peer) {
				got = append(got, d.Field)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Compare flags %v, want %v", got, tt.want)
			}
		})
	}
	if d := compare(answer{Err: codes.InvalidArgument}, base); len(d) != 1 || d[0].Field != "grpc_code" {
		t.Errorf("an error against an answer: %v, want one grpc_code difference", d)
	}
}

// oneDomain is a one-domain replay limiting k0 per value at rpu per minute.
func oneDomain(rpu uint32) *replay {
	return &replay{Seed: 7, Run: "t", Domains: []domain{{Name: "d0_t",
		Nodes: []*node{{Key: "k0", Limit: &limit{Unit: "minute", RPU: rpu, Name: "n"}}}}}}
}

func request(domain string, hits ...uint64) *rlv3.RateLimitRequest {
	req := &rlv3.RateLimitRequest{Domain: domain}
	for _, h := range hits {
		req.Descriptors = append(req.Descriptors, &rlcommon.RateLimitDescriptor{
			Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "k0", Value: "a"}}, HitsAddend: wrapperspb.UInt64(h)})
	}
	return req
}

// at is 10 s into a minute: a step there crosses no boundary.
var at = time.Date(2026, 3, 2, 0, 0, 10, 0, time.UTC)

func TestClassifierSortsEveryStep(t *testing.T) {
	ok := func(rem uint32) answer { return oneAnswer(rlv3.RateLimitResponse_OK, rem, 3, 50*time.Second) }
	over := oneAnswer(rlv3.RateLimitResponse_OVER_LIMIT, 0, 3, 50*time.Second)
	type scripted struct {
		req       *rlv3.RateLimitRequest
		rls, peer answer
		at        time.Duration // from at; the step lasts 2 ms
	}
	tests := []struct {
		name  string
		steps []scripted
		want  result
	}{
		{"equal answers", []scripted{{request("d0_t", 1), ok(2), ok(2), 0}},
			result{Requests: 1, Compared: 1, Equal: 1}},
		{"one field differs", []scripted{{request("d0_t", 1), ok(2), ok(1), 0}},
			result{Requests: 1, Compared: 1, Unexpected: 1, Classes: map[string]int{"limit_remaining named": 1}}},
		{"malformed request: INVALID_ARGUMENT against UNKNOWN is deliberate",
			[]scripted{{request("d0_t"), answer{Err: codes.InvalidArgument}, answer{Err: codes.Unknown}, 0}},
			result{Requests: 1, Compared: 1, Deliberate: 1, ByDeliberate: map[string]int{"malformed-request": 1}}},
		{"a well-formed request refused by rls is unexpected",
			[]scripted{{request("d0_t", 1), answer{Err: codes.InvalidArgument}, ok(2), 0}},
			result{Requests: 1, Compared: 1, Unexpected: 1, Classes: map[string]int{"grpc_code": 1}}},
		{"hits above the limit: that step's remaining and the window after are deliberate", []scripted{
			{request("d0_t", 1), ok(2), ok(2), 0},
			{request("d0_t", 5), oneAnswer(rlv3.RateLimitResponse_OVER_LIMIT, 2, 3, 50*time.Second), over, time.Second},
			{request("d0_t", 1), ok(1), over, 2 * time.Second},
		}, result{Requests: 3, Compared: 3, Equal: 1, Deliberate: 2, ByDeliberate: map[string]int{"hits-addend-above-limit": 2}}},
		{"hits above the limit: the later descriptors of the identity in that request are deliberate", []scripted{{request("d0_t", 5, 1),
			answer{Resp: &rlv3.RateLimitResponse{OverallCode: rlv3.RateLimitResponse_OVER_LIMIT, Statuses: []*rlv3.RateLimitResponse_DescriptorStatus{
				oneAnswer(rlv3.RateLimitResponse_OVER_LIMIT, 3, 3, 50*time.Second).Resp.Statuses[0], ok(2).Resp.Statuses[0]}}},
			answer{Resp: &rlv3.RateLimitResponse{OverallCode: rlv3.RateLimitResponse_OVER_LIMIT, Statuses: []*rlv3.RateLimitResponse_DescriptorStatus{
				over.Resp.Statuses[0], over.Resp.Statuses[0]}}}, 0},
		}, result{Requests: 1, Compared: 1, Deliberate: 1, ByDeliberate: map[string]int{"hits-addend-above-limit": 1}}},
		{"hits above the limit explain nothing in the next window", []scripted{
			{request("d0_t", 5), over, over, 0},
			{request("d0_t", 1), ok(2), over, time.Minute},
		}, result{Requests: 2, Compared: 2, Equal: 1, Unexpected: 1, Classes: map[string]int{"code,limit_remaining,overall_code named": 1}}},
		{"a step across a minute boundary is skipped, and its identity's next differences", []scripted{
			{request("d0_t", 1), ok(2), ok(2), 50*time.Second - time.Millisecond},
			{request("d0_t", 1), ok(1), ok(2), 51 * time.Second},
		}, result{Requests: 2, Skipped: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClassifier(oneDomain(3), "memcached")
			for i, s := range tt.steps {
				t0 := at.Add(s.at)
				c.add(i, step{Req: s.req, RLS: s.rls, Peer: s.peer}, t0, t0.Add(2*time.Millisecond))
			}
			got := *c.Result
			if got.Requests != tt.want.Requests || got.Compared != tt.want.Compared || got.Equal != tt.want.Equal ||
				got.Unexpected != tt.want.Unexpected || got.Deliberate != tt.want.Deliberate || got.Skipped != tt.want.Skipped {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if !maps.Equal(got.ByDeliberate, tt.want.ByDeliberate) && len(got.ByDeliberate)+len(tt.want.ByDeliberate) > 0 {
				t.Errorf("by deliberate %v, want %v", got.ByDeliberate, tt.want.ByDeliberate)
			}
			if !maps.Equal(got.Classes, tt.want.Classes) && len(got.Classes)+len(tt.want.Classes) > 0 {
				t.Errorf("classes %v, want %v", got.Classes, tt.want.Classes)
			}
			if len(got.Differences) != got.Unexpected {
				t.Errorf("%d differences listed for %d unexpected", len(got.Differences), got.Unexpected)
			}
		})
	}
}

func TestEveryDeliberateDifferenceHasANameAndAReason(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range deliberates {
		if d.Name == "" || d.Reason == "" || seen[d.Name] || d.Explains == nil && d.Diverges == nil {
			t.Errorf("deliberate difference %q: want a unique name, a reason and a rule", d.Name)
		}
		seen[d.Name] = true
	}
}

// The README's table of deliberate differences names exactly the ones the
// harness knows.
func TestREADMEListsEveryDeliberateDifference(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "Deliberate differences from envoyproxy/ratelimit")
	if !ok {
		t.Fatal("README.md: no table of deliberate differences from envoyproxy/ratelimit")
	}
	table, _, _ = strings.Cut(table, "\n\n#")
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\|").FindAllStringSubmatch(table, -1) {
		listed[m[1]] = true
	}
	for _, d := range deliberates {
		if !listed[d.Name] {
			t.Errorf("README.md: no row for the deliberate difference %q", d.Name)
		}
		delete(listed, d.Name)
	}
	for name := range listed {
		t.Errorf("README.md lists %q, which the harness does not know", name)
	}
}

func TestGenerateIsASeedsFunction(t *testing.T) {
	a, b := generate(5, "r", 50), generate(5, "r", 50)
	if !reflect.DeepEqual(a.files(), b.files()) {
		t.Error("the same seed gave two configs")
	}
	for i := range a.Requests {
		if !proto.Equal(a.Requests[i], b.Requests[i]) {
			t.Fatalf("the same seed gave two requests %d", i)
		}
	}
	if c := generate(6, "r", 50); reflect.DeepEqual(a.files(), c.files()) {
		t.Error("seeds 5 and 6 gave the same config")
	}
}

// TestGeneratedConfigsUseTheFeaturesAndLoadInRLS: over 50 seeds the
// configs use every feature the harness is for, and rls loads each.
func TestGeneratedConfigsUseTheFeaturesAndLoadInRLS(t *testing.T) {
	features := map[string]string{"key-only default": "- key: k0\n", "wildcard": `*"`, "shadow": "shadow_mode: true",
		"unlimited": "unlimited: true", "replaces": "replaces:", "name": "name: n", "nested": "descriptors:\n  ",
		"second": "unit: second", "minute": "unit: minute", "hour": "unit: hour", "day": "unit: day"}
	seen := map[string]bool{}
	for seed := range uint64(50) {
		rp := generate(seed, "r", 10)
		files := map[string][]byte{}
		for name, body := range rp.files() {
			files[name] = []byte(body)
			for f, s := range features {
				if strings.Contains(body, s) {
					seen[f] = true
				}
			}
		}
		if _, err := rls.Parse(files, rls.Options{}); err != nil {
			t.Errorf("seed %d: rls refuses the config: %v", seed, err)
		}
	}
	for f := range features {
		if !seen[f] {
			t.Errorf("no config of 50 seeds has %s", f)
		}
	}
}
