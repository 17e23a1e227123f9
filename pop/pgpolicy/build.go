package pgpolicy

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/poplimit/poplimit/pop/policy"
)

// TierRow is one rate_limit_policies row (design columns, then the
// extensions of migration 0002) with its extra limits.
type TierRow struct {
	PolicyID      string
	TierName      string
	RoutePattern  string
	WindowSeconds int64
	MaxRequests   int64
	BurstCapacity int64
	FailMode      string
	Algorithm     string
	Precision     int64
	OnReject      string
	Scope         string
	IsAnonymous   bool
	Extra         []LimitRow
}

// LimitRow is one rate_limit_policy_limits row.
type LimitRow struct {
	Name          string
	Algorithm     string
	WindowSeconds int64
	MaxRequests   int64
	BurstCapacity int64
	Precision     int64
	OnReject      string
}

// KeyRow is one client_api_keys row.
type KeyRow struct {
	Digest   string // api_key: hex SHA-256
	TenantID string // "" when NULL
	PolicyID string // "" when NULL
	Active   bool   // is_active; NULL reads as false (revoked)
}

// Settings is the poplimit_settings row.
type Settings struct {
	APIKeyHeader string
	UnknownKey   string // anonymous | reject
}

// Skipped is a row left out of a snapshot, and why.
type Skipped struct {
	Table, Row, Reason string
}

var digestRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// yamlLimit is one limit in the generated policy document.
type yamlLimit struct {
	Name      string `yaml:"name"`
	Algorithm string `yaml:"algorithm"`
	Quantity  int64  `yaml:"quantity"`
	Window    string `yaml:"window"`
	Burst     int64  `yaml:"burst,omitempty"`
	Precision int64  `yaml:"precision,omitempty"`
	OnReject  string `yaml:"on_reject"`
}

type yamlPolicy struct {
	Name        string   `yaml:"name"`
	Routes      []string `yaml:"routes"`
	Identity    []string `yaml:"identity"`
	Tier        string   `yaml:"tier"`
	DefaultTier string   `yaml:"default_tier"`
	FailMode    string   `yaml:"fail_mode"`
}

type yamlDoc struct {
	APIKey   map[string]any                    `yaml:"api_key"`
	Tiers    map[string]map[string][]yamlLimit `yaml:"tiers"`
	Policies []yamlPolicy                      `yaml:"policies"`
	Unlimit  string                            `yaml:"unmatched"`
}

func (t TierRow) limits() []yamlLimit {
	main := LimitRow{Name: "main", Algorithm: t.Algorithm, WindowSeconds: t.WindowSeconds, MaxRequests: t.MaxRequests,
		BurstCapacity: t.BurstCapacity, Precision: t.Precision, OnReject: t.OnReject}
	out := []yamlLimit{main.yaml()}
	for _, l := range t.Extra {
		out = append(out, l.yaml())
	}
	return out
}

func (l LimitRow) yaml() yamlLimit {
	return yamlLimit{Name: l.Name, Algorithm: l.Algorithm, Quantity: l.MaxRequests, Window: strconv.FormatInt(l.WindowSeconds, 10) + "s",
		Burst: l.BurstCapacity, Precision: l.Precision, OnReject: l.OnReject}
}

// scope is the identity parts of a scope column.
func scope(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// policyName names the pop policy of a route pattern: stable across
// snapshots (counts and metrics keep their names when other rows change).
// Letters, digits, '-' and '_' (pop's rule): the pattern with others as
// '_', then a digest prefix telling apart patterns that map alike.
func policyName(route string) string {
	b := []byte("route_")
	for _, c := range []byte(route) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			b = append(b, c)
		} else {
			b = append(b, '_')
		}
	}
	return string(b) + "_" + policy.KeyDigest(route)[:8]
}

// document is the policy document of tiers (already validated ones, or one
// tier alone for validation) under settings.
func document(tiers []TierRow, st Settings) ([]byte, error) {
	d := yamlDoc{APIKey: map[string]any{"header": st.APIKeyHeader}, Tiers: map[string]map[string][]yamlLimit{}, Unlimit: "unlimited"}
	anon := ""
	for _, t := range tiers {
		d.Tiers[t.TierName] = map[string][]yamlLimit{"limits": t.limits()}
		if t.IsAnonymous && (anon == "" || t.TierName < anon) {
			anon = t.TierName
		}
	}
	byRoute := map[string][]TierRow{}
	for _, t := range tiers {
		byRoute[t.RoutePattern] = append(byRoute[t.RoutePattern], t)
	}
	routes := make([]string, 0, len(byRoute))
	for r := range byRoute {
		routes = append(routes, r)
	}
	slices.Sort(routes)
	for _, r := range routes {
		rows := byRoute[r]
		slices.SortFunc(rows, func(a, b TierRow) int { return strings.Compare(a.TierName, b.TierName) })
		// The route's own settings (identity, fail mode, default tier)
		// come from its anonymous row, else its first row by name.
		lead := rows[0]
		for _, t := range rows {
			if t.IsAnonymous {
				lead = t
				break
			}
		}
		def := anon
		if def == "" {
			def = lead.TierName
		}
		d.Policies = append(d.Policies, yamlPolicy{Name: policyName(r), Routes: []string{r}, Identity: scope(lead.Scope),
			Tier: "api_key", DefaultTier: def, FailMode: lead.FailMode})
	}
	return yaml.Marshal(d)
}

// compileFile parses the document of tiers into a policy.File.
func compileFile(name string, tiers []TierRow, st Settings) (*policy.File, error) {
	doc, err := document(tiers, st)
	if err != nil {
		return nil, err
	}
	return policy.Parse(name, doc)
}

// validTiers returns the tiers that compile alone, and a Skipped for each
// other one (negative limits, an unknown fail mode or algorithm, a route
// pattern that does not parse: policy.Parse's message is the reason).
func validTiers(tiers []TierRow, st Settings) ([]TierRow, []Skipped) {
	var ok []TierRow
	var skipped []Skipped
	for _, t := range tiers {
		one := t
		one.IsAnonymous = true
		if _, err := compileFile("row", []TierRow{one}, st); err != nil {
			skipped = append(skipped, Skipped{Table: "rate_limit_policies", Row: t.PolicyID + " (" + t.TierName + ")", Reason: err.Error()})
			continue
		}
		ok = append(ok, t)
	}
	return ok, skipped
}

// keyRecords builds pop's key table from rows: by digest, tier named by
// policy_id (a key of a skipped or missing tier gets the default tier, an
// inactive one stays inactive). Rows whose api_key is not a digest are
// skipped.
func keyRecords(rows []KeyRow, tierByID map[string]string) (map[string]policy.KeyRecord, []Skipped) {
	out := make(map[string]policy.KeyRecord, len(rows))
	var skipped []Skipped
	for _, k := range rows {
		if rec, ok, sk := keyRecord(k, tierByID); ok {
			out[k.Digest] = rec
		} else {
			skipped = append(skipped, sk)
		}
	}
	return out, skipped
}

func keyRecord(k KeyRow, tierByID map[string]string) (policy.KeyRecord, bool, Skipped) {
	if !digestRE.MatchString(k.Digest) {
		return policy.KeyRecord{}, false, Skipped{Table: "client_api_keys", Row: fmt.Sprintf("%.12q…", k.Digest), Reason: "api_key is not a lower-case hex SHA-256 digest (64 characters)"}
	}
	return policy.KeyRecord{Tenant: k.TenantID, Tier: tierByID[k.PolicyID], Inactive: !k.Active}, true, Skipped{}
}
