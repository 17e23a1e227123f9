package differential

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/pop/rls"
)

// result is one replay's outcome. Every request is exactly one of equal,
// deliberate, unexpected or skipped; Compared = Requests − Skipped.
type result struct {
	Seed  uint64 `json:"seed"`
	Store string `json:"store"`
	Run   string `json:"run"`
	// Requests sent to each side.
	Requests int `json:"requests"`
	// Compared are the requests whose answers were compared.
	Compared int `json:"compared"`
	Equal    int `json:"equal"`
	// Unexpected are the requests with a difference no Deliberate entry
	// explains; Deliberate those whose differences all are explained.
	Unexpected int `json:"unexpected"`
	Deliberate int `json:"deliberate"`
	// Skipped are the requests not compared: a window of a unit in use
	// ended between the two answers (or on an earlier such request of the
	// same identity, whose counts then went to different windows).
	Skipped int `json:"skipped"`
	// ByDeliberate counts the deliberate requests by Deliberate.Name.
	ByDeliberate map[string]int `json:"by_deliberate,omitempty"`
	// Classes counts the unexpected requests by Difference.Class.
	Classes     map[string]int `json:"classes,omitempty"`
	Differences []difference   `json:"differences,omitempty"`
}

// Difference is one unexpected difference, everything needed to replay
// it: the seed, the step (0-based index of the request), the request and
// both answers; or a config rls refuses (Req nil, Step -1).
type difference struct {
	Seed      uint64
	Store     string
	Step      int
	Req       *rlv3.RateLimitRequest
	RLS, Peer answer
	Diffs     []diff // the unexplained ones
	// Class names the differing fields and the features of the
	// descriptors concerned (shadow, repeated, hits=0, ...).
	Class string
}

// MarshalJSON is d with the request in protobuf text and the answers as
// String prints them.
func (d difference) MarshalJSON() ([]byte, error) {
	ds := make([]string, len(d.Diffs))
	for i, x := range d.Diffs {
		ds[i] = x.String()
	}
	v := struct {
		Seed    uint64   `json:"seed"`
		Store   string   `json:"store"`
		Step    int      `json:"step"`
		Class   string   `json:"class"`
		Request string   `json:"request,omitempty"`
		RLS     string   `json:"rls,omitempty"`
		Peer    string   `json:"peer,omitempty"`
		Diffs   []string `json:"differs"`
	}{Seed: d.Seed, Store: d.Store, Step: d.Step, Class: d.Class, Diffs: ds}
	if d.Req != nil {
		v.Request, v.RLS, v.Peer = prototext.MarshalOptions{}.Format(d.Req), d.RLS.String(), d.Peer.String()
	}
	return json.Marshal(v)
}

func (d difference) String() string {
	ds := make([]string, len(d.Diffs))
	for i, x := range d.Diffs {
		ds[i] = x.String()
	}
	if d.Req == nil { // a config refused
		return fmt.Sprintf("seed %d store %s [%s]\n  differs: %s", d.Seed, d.Store, d.Class, strings.Join(ds, "; "))
	}
	return fmt.Sprintf("seed %d store %s step %d [%s]\n  request: %s\n  rls:  %s\n  peer: %s\n  differs: %s",
		d.Seed, d.Store, d.Step, d.Class, prototext.MarshalOptions{}.Format(d.Req), d.RLS, d.Peer, strings.Join(ds, "; "))
}

// PaceMargin is how close to a window boundary of the finest unit in use
// a request may start: closer, the replay waits for the boundary to pass,
// so the two answers of a request rarely straddle one.
const paceMargin = 60 * time.Millisecond

// taint marks an identity whose counts differ between the two sides by
// name's doing until the window ending at until.
type taint struct {
	name  string
	until time.Time
}

// boundaryTaint is the taint of a request that straddled a window
// boundary: the differences it causes are skipped, not deliberate.
const boundaryTaint = "window-boundary"

// Run replays rp in lockstep: each request to rls, then to peer, then the
// two answers compared (Compare) and classified (deliberates). Both
// services must have loaded rp.Files. A failed call is an answer (its gRPC
// code), not an error; Run fails only when ctx ends.
func run(ctx context.Context, rp *replay, store string, rls, peer rlv3.RateLimitServiceClient) (*result, error) {
	c := newClassifier(rp, store)
	units := rp.units()
	for i, req := range rp.Requests {
		if len(units) > 0 {
			if err := pace(ctx, time.Now(), units[0]); err != nil {
				return c.Result, err
			}
		}
		t0 := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		a := newAnswer(rls.ShouldRateLimit(cctx, req))
		b := newAnswer(peer.ShouldRateLimit(cctx, req))
		cancel()
		t1 := time.Now()
		if err := ctx.Err(); err != nil {
			return c.Result, err
		}
		c.add(i, step{Req: req, RLS: a, Peer: b}, t0, t1)
	}
	return c.Result, nil
}

// Classifier classifies a replay's steps in order into its Result; it
// remembers the identities whose counts a deliberate difference (or a
// window boundary) made differ.
type classifier struct {
	Result  *result
	rp      *replay
	units   []time.Duration
	tainted map[string]taint
}

// NewClassifier is an empty Result for rp over store.
func newClassifier(rp *replay, store string) *classifier {
	return &classifier{rp: rp, units: rp.units(), tainted: map[string]taint{},
		Result: &result{Seed: rp.Seed, Store: store, Run: rp.Run, ByDeliberate: map[string]int{}, Classes: map[string]int{}}}
}

// Add classifies step i, whose two answers were read between t0 and t1.
func (c *classifier) add(i int, st step, t0, t1 time.Time) {
	res, req := c.Result, st.Req
	res.Requests++
	for id, t := range c.tainted {
		if !t0.Before(t.until) {
			delete(c.tainted, id)
		}
	}
	crossed := false
	for _, u := range c.units {
		if windowOf(t0, u) != windowOf(t1, u) {
			crossed = true
		}
	}
	if crossed {
		res.Skipped++
		for j := range req.Descriptors {
			if u, ok := stepUnit(st, j); ok && windowOf(t0, u) != windowOf(t1, u) {
				taintID(c.tainted, identity(req, j), boundaryTaint, windowEnd(t1, u))
			}
		}
		return
	}
	diffs := compare(st.RLS, st.Peer)
	explained := c.explain(st, diffs)
	var unexplained []diff
	by := ""
	for k, d := range diffs {
		switch {
		case explained[k] == "":
			unexplained = append(unexplained, d)
		case by == "" || explained[k] == boundaryTaint:
			by = explained[k]
		}
	}
	switch {
	case len(unexplained) > 0:
		res.Compared++
		res.Unexpected++
		diff := difference{Seed: c.rp.Seed, Store: res.Store, Step: i, Req: req, RLS: st.RLS, Peer: st.Peer, Diffs: unexplained, Class: c.rp.class(st, unexplained)}
		res.Classes[diff.Class]++
		res.Differences = append(res.Differences, diff)
	case by == boundaryTaint:
		res.Skipped++
	case by != "":
		res.Compared++
		res.Deliberate++
		res.ByDeliberate[by]++
	default:
		res.Compared++
		res.Equal++
	}
	for j := range req.Descriptors {
		for _, e := range deliberates {
			if e.Diverges == nil || !e.Diverges(st, j) {
				continue
			}
			if u, ok := stepUnit(st, j); ok {
				taintID(c.tainted, identity(req, j), e.Name, windowEnd(t1, u))
			}
		}
	}
}

// divergedWithin names, per descriptor of st's request, the deliberate
// difference an earlier descriptor of the same identity in the request
// diverged the counts by ("" for none).
func divergedWithin(st step) []string {
	req := st.Req
	// A descriptor that diverges the counts of its identity does so for
	// the later descriptors of the same identity in this request too (the
	// peer counts a request's descriptors in order).
	within := make([]string, len(req.Descriptors))
	for j := range req.Descriptors {
		for _, e := range deliberates {
			if e.Diverges == nil || !e.Diverges(st, j) {
				continue
			}
			for k := j + 1; k < len(req.Descriptors); k++ {
				if within[k] == "" && identity(req, k) == identity(req, j) {
					within[k] = e.Name
				}
			}
		}
	}
	return within
}

// explain names, per difference, the deliberate difference or the taint
// that explains it ("" for none).
func (c *classifier) explain(st step, diffs []diff) []string {
	req := st.Req
	within := divergedWithin(st)
	explained := make([]string, len(diffs)) // by whom, "" for none
	firstDesc := ""
	allDesc := true
	for k, d := range diffs {
		if d.Desc >= 0 {
			if t, ok := c.tainted[identity(req, d.Desc)]; ok {
				explained[k] = t.name
			} else if d.Desc < len(within) {
				explained[k] = within[d.Desc]
			}
		}
		for _, e := range deliberates {
			if explained[k] == "" && e.Explains != nil && e.Explains(st, d) {
				explained[k] = e.Name
			}
		}
		if d.Desc >= 0 && d.Field == "code" {
			if explained[k] == "" {
				allDesc = false
			} else if firstDesc == "" {
				firstDesc = explained[k]
			}
		}
	}
	for k, d := range diffs { // overall_code follows the descriptors' codes
		if d.Field == "overall_code" && explained[k] == "" && allDesc && firstDesc != "" {
			explained[k] = firstDesc
		}
	}
	return explained
}

// pace waits, when now is within PaceMargin of the end of its window of
// unit, until just after that end.
func pace(ctx context.Context, now time.Time, unit time.Duration) error {
	left := windowEnd(now, unit).Sub(now)
	if left >= paceMargin {
		return nil
	}
	t := time.NewTimer(left + 5*time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// windowOf is the epoch-aligned window of unit holding t (both sides'
// fixed windows).
func windowOf(t time.Time, unit time.Duration) int64 { return t.UnixNano() / int64(unit) }

func windowEnd(t time.Time, unit time.Duration) time.Time {
	return time.Unix(0, (windowOf(t, unit)+1)*int64(unit))
}

// stepUnit is the window length of descriptor j's limit as either side
// answered it.
func stepUnit(s step, j int) (time.Duration, bool) {
	for _, a := range []answer{s.Peer, s.RLS} {
		if st := a.Resp.GetStatuses(); j < len(st) && st[j].GetCurrentLimit() != nil {
			u := rls.Unit(st[j].GetCurrentLimit().GetUnit())
			if u < rls.UnitSecond || u > rls.UnitWeek {
				return 0, false
			}
			return u.Duration(), true
		}
	}
	return 0, false
}

func taintID(m map[string]taint, id, name string, until time.Time) {
	if t, ok := m[id]; !ok || t.until.Before(until) || t.name != boundaryTaint && name == boundaryTaint {
		m[id] = taint{name: name, until: until}
	}
}

// identity is what both sides count descriptor j of req under: its domain
// and every entry (envoyproxy/ratelimit's cache key, rls's parts).
func identity(req *rlv3.RateLimitRequest, j int) string {
	var b strings.Builder
	b.WriteString(req.GetDomain())
	for _, e := range req.Descriptors[j].GetEntries() {
		b.WriteString("\x00" + e.GetKey() + "\x00" + e.GetValue())
	}
	return b.String()
}

// class is the differing fields, then the features of the descriptors
// they concern, e.g. "code,limit_remaining shadow".
func (rp *replay) class(s step, diffs []diff) string {
	var fields, tags []string
	add := func(xs *[]string, x string) {
		if !slices.Contains(*xs, x) {
			*xs = append(*xs, x)
		}
	}
	for _, d := range diffs {
		add(&fields, d.Field)
		if d.Desc < 0 {
			continue
		}
		j := d.Desc
		if n := rp.match(s.Req.GetDomain(), s.Req.Descriptors[j].GetEntries()); n != nil {
			if n.Shadow {
				add(&tags, "shadow")
			}
			if n.Limit.Unlimited {
				add(&tags, "unlimited")
			}
			if len(n.Limit.Replaces) > 0 || n.Limit.Name != "" {
				add(&tags, "named")
			}
		}
		for k := range s.Req.Descriptors {
			if k != j && identity(s.Req, k) == identity(s.Req, j) {
				add(&tags, "repeated")
			}
		}
		if s.hits(j) == 0 {
			add(&tags, "hits=0")
		}
	}
	slices.Sort(fields)
	slices.Sort(tags)
	return strings.TrimSpace(strings.Join(fields, ",") + " " + strings.Join(tags, ","))
}

// Match is the generated node whose rate_limit applies to entries in
// domain, nil for none, by envoyproxy/ratelimit's documented lookup (each
// entry: key and value, else the first wildcard matching, else the key
// alone; the limit of the node of the last entry). It only labels
// differences; the answers themselves come from the services.
func (rp *replay) match(domain string, entries []*rlcommon.RateLimitDescriptor_Entry) *node {
	var nodes []*node
	for _, d := range rp.Domains {
		if d.Name == domain {
			nodes = d.Nodes
		}
	}
	var cur *node
	for _, e := range entries {
		next := find(nodes, func(n *node) bool { return n.Key == e.Key && n.Value == e.Value })
		if next == nil {
			next = find(nodes, func(n *node) bool {
				return n.Key == e.Key && strings.HasSuffix(n.Value, "*") && strings.HasPrefix(e.Value, strings.TrimSuffix(n.Value, "*"))
			})
		}
		if next == nil {
			next = find(nodes, func(n *node) bool { return n.Key == e.Key && n.Value == "" })
		}
		if next == nil {
			return nil
		}
		cur, nodes = next, next.Children
	}
	if cur == nil || cur.Limit == nil {
		return nil
	}
	return cur
}

func find(nodes []*node, f func(*node) bool) *node {
	for _, n := range nodes {
		if f(n) {
			return n
		}
	}
	return nil
}

// results are RunSeeds' replays, in order (JSON: an array of them).
type results []*result

// Tables are the replays, one row each, and their sums.
func (rs results) Tables() []*bench.Table {
	t := &bench.Table{Header: []string{"seed", "store", "requests", "compared", "differing (unexpected)", "deliberate", "skipped"}}
	var sum result
	for _, r := range rs {
		t.Add(r.Seed, r.Store, r.Requests, r.Compared, r.Unexpected, r.Deliberate, r.Skipped)
		sum.Requests, sum.Compared, sum.Unexpected = sum.Requests+r.Requests, sum.Compared+r.Compared, sum.Unexpected+r.Unexpected
		sum.Deliberate, sum.Skipped = sum.Deliberate+r.Deliberate, sum.Skipped+r.Skipped
	}
	t.Add("all", "", sum.Requests, sum.Compared, sum.Unexpected, sum.Deliberate, sum.Skipped)
	return []*bench.Table{t}
}

// WriteSummary writes every unexpected difference, then the count of each
// class of them and of each deliberate difference, with its reason.
func (rs results) WriteSummary(w io.Writer) {
	classes, deliberate := map[string]int{}, map[string]int{}
	for _, r := range rs {
		for _, d := range r.Differences {
			fmt.Fprintln(w, d)
		}
		for k, v := range r.Classes {
			classes[k] += v
		}
		for k, v := range r.ByDeliberate {
			deliberate[k] += v
		}
	}
	for _, k := range slices.Sorted(maps.Keys(classes)) {
		fmt.Fprintf(w, "unexpected %-50s %d\n", k, classes[k])
	}
	for _, d := range deliberates {
		fmt.Fprintf(w, "deliberate %-30s %d  (%s)\n", d.Name, deliberate[d.Name], d.Reason)
	}
}
