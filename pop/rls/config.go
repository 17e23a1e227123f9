// Package rls is Envoy's rate limit service over pop's limit engine: the
// configuration format of envoyproxy/ratelimit (YAML files of a domain and
// nested descriptors), its descriptor matching, and the gRPC
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit answered by
// pop.Limiter.DecideAll, so several rls processes of one PoP share one
// count per key through mcproxy exactly like edge workers.
//
// The configuration is envoyproxy/ratelimit's, unchanged, plus optional
// poplimit fields under rate_limit (algorithm, window, precision, burst,
// on_reject, fail_mode, limits); a file without them behaves as
// envoyproxy/ratelimit's does. README.md's Envoy section has the
// compatibility table.
package rls

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/proxy/yamlpos"
)

// ErrConfig is wrapped by every configuration error; each one is a
// *ConfigError naming the file and line.
var ErrConfig = errors.New("rls: invalid config")

// ConfigError is one problem of one configuration file.
type ConfigError struct {
	File string
	Line int // 1-based; 0 when the file could not be read
	Msg  string
}

func (e *ConfigError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// Unwrap makes errors.Is(err, ErrConfig) true.
func (e *ConfigError) Unwrap() error { return ErrConfig }

// Unit is a rate limit unit of envoyproxy/ratelimit, numbered as Envoy's
// RateLimitResponse.RateLimit.Unit.
type Unit int32

// The units; Month is 30 days and Year 365, as envoyproxy/ratelimit's.
const (
	UnitUnknown Unit = iota
	UnitSecond
	UnitMinute
	UnitHour
	UnitDay
	UnitMonth
	UnitYear
	UnitWeek
)

var unitNames = map[string]Unit{"second": UnitSecond, "minute": UnitMinute, "hour": UnitHour, "day": UnitDay, "week": UnitWeek, "month": UnitMonth, "year": UnitYear}

// Duration is the length of one window of u (0 for UnitUnknown).
func (u Unit) Duration() time.Duration {
	day := 24 * time.Hour
	return [...]time.Duration{0, time.Second, time.Minute, time.Hour, day, 30 * day, 365 * day, 7 * day}[u]
}

// Limit is the rate limit of one descriptor node.
type Limit struct {
	// FullKey is the node's path, "domain.key_value.key", the statistics'
	// key and the engine rule's name.
	FullKey string
	// Name and Replaces: a matched limit naming a Name another matched
	// limit Replaces is not applied.
	Name     string
	Replaces []string
	// Unit and RequestsPerUnit are envoyproxy/ratelimit's, reported in
	// current_limit (Unit is UnitUnknown for a window of any length).
	Unit            Unit
	RequestsPerUnit uint32
	// Unlimited: matched, never counted.
	Unlimited bool
	// ShadowMode: decided, counted and answered as an enforcing rule
	// would be, except that OVER_LIMIT is answered OK (pop's dry run,
	// LimitSpec.Shadow, on every limit of the rule).
	ShadowMode     bool
	DetailedMetric bool
	// Rule is the engine definition (Name FullKey); its first limit is the
	// one reported in statuses and headers.
	Rule pop.RuleSpec
	// Fixed is the epoch-aligned window of a fixed-window first limit (its
	// duration_until_reset is computed from it, as envoyproxy/ratelimit's).
	Fixed time.Duration
	// Line is where the limit is defined.
	Line int
}

// Node is one descriptor of the tree: children by key and value, by key
// alone (any value), and wildcard values in file order.
type Node struct {
	byValue       map[[2]string]*Node
	byKey         map[string]*Node
	wild          []wildNode
	Limit         *Limit
	ValueToMetric bool
	fullKey       string
	value         string // the value as configured ("" for a key alone)
}

type wildNode struct {
	key   string
	parts []string // the value split at '*'
	node  *Node
}

// Config is a loaded set of domains, immutable.
type Config struct {
	Domains map[string]*Node
	// Files lists the files loaded, sorted.
	Files []string
	// Rules are the engine rules of every limit, in file order.
	Rules []pop.RuleSpec
	// Options are those the files compiled with (request-level limit
	// overrides follow them too).
	Options Options
}

// Options change how files compile.
type Options struct {
	// StopIncrementOverLimit is STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: a
	// rejected request is not counted (every limit defaults to
	// on_reject: refund instead of count).
	StopIncrementOverLimit bool
	// MergeDomains lets several files extend one domain
	// (MERGE_DOMAIN_CONFIG); otherwise a domain defined twice is an error.
	MergeDomains bool
}

// LoadDir loads every *.yaml and *.yml file of dir (dot files skipped).
// Every problem of every file is reported (errors.Join of *ConfigError);
// nothing is returned then.
func LoadDir(dir string, opt Options) (*Config, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, &ConfigError{File: dir, Msg: err.Error()}
	}
	files := map[string][]byte{}
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || strings.HasPrefix(n, ".") || (!strings.HasSuffix(n, ".yaml") && !strings.HasSuffix(n, ".yml")) {
			continue
		}
		p := filepath.Join(dir, n)
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, &ConfigError{File: p, Msg: err.Error()}
		}
		files[p] = data
	}
	return Parse(files, opt)
}

// Parse compiles the documents of files (name → YAML). Every problem of
// every file is reported (errors.Join of *ConfigError).
func Parse(files map[string][]byte, opt Options) (*Config, error) {
	c := &Config{Domains: map[string]*Node{}, Options: opt}
	for n := range files {
		c.Files = append(c.Files, n)
	}
	sort.Strings(c.Files)
	var errs []error
	for _, name := range c.Files {
		p := &parser{file: name, opt: opt, cfg: c}
		p.document(files[name])
		errs = append(errs, p.errs...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

type parser struct {
	file string
	opt  Options
	cfg  *Config
	errs []error
}

// maxErrors bounds the problems reported per file.
const maxErrors = 50

func (p *parser) errf(n *yaml.Node, format string, args ...any) {
	if len(p.errs) >= maxErrors {
		return
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs = append(p.errs, &ConfigError{File: p.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) document(data []byte) {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		p.errs = append(p.errs, &ConfigError{File: p.file, Line: yamlpos.Line(data, err), Msg: yamlpos.Reason(err)})
		return
	}
	if len(doc.Content) == 0 {
		p.errf(&doc, "empty file: want a domain and descriptors")
		return
	}
	root := doc.Content[0]
	var domain string
	var descs *yaml.Node
	p.fields(root, "file", []string{"domain", "descriptors"}, func(k string, v *yaml.Node) {
		switch k {
		case "domain":
			domain = p.str(v, k)
		case "descriptors":
			descs = v
		}
	})
	if domain == "" {
		p.errf(root, "config file cannot have empty domain")
		return
	}
	top := p.cfg.Domains[domain]
	if top != nil && !p.opt.MergeDomains {
		p.errf(root, "duplicate domain '%s' in config file", domain)
		return
	}
	if top == nil {
		top = newNode(domain)
		p.cfg.Domains[domain] = top
	}
	if descs != nil {
		p.descriptors(descs, top)
	}
}

func newNode(fullKey string) *Node {
	return &Node{byValue: map[[2]string]*Node{}, byKey: map[string]*Node{}, fullKey: fullKey}
}

// fields walks mapping n, rejecting keys not in known and repeated keys.
func (p *parser) fields(n *yaml.Node, what string, known []string, fn func(k string, v *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		p.errf(n, "%s: want a mapping, got %s", what, kindName(n))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case k.Kind != yaml.ScalarNode:
			p.errf(k, "%s: a key must be a plain string", what)
		case !slices.Contains(known, k.Value):
			p.errf(k, "config error, unknown key '%s' in %s", k.Value, what)
		case seen[k.Value]:
			p.errf(k, "%s: key '%s' given twice", what, k.Value)
		default:
			seen[k.Value] = true
			fn(k.Value, v)
		}
	}
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "nothing"
}

func (p *parser) str(n *yaml.Node, what string) string {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "!!int" && n.Tag != "!!float" && n.Tag != "!!bool") {
		p.errf(n, "%s: want a string, got %s", what, kindName(n))
		return ""
	}
	return n.Value
}

func (p *parser) bool(n *yaml.Node, what string) bool {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		p.errf(n, "%s: want true or false, got %s", what, kindName(n))
		return false
	}
	b, _ := strconv.ParseBool(strings.ToLower(n.Value))
	return b
}

// uint reads a non-negative integer of at most max.
func (p *parser) uint(n *yaml.Node, what string, max uint64) uint64 {
	v, err := strconv.ParseUint(n.Value, 10, 64)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || err != nil || v > max {
		p.errf(n, "%s: want an integer from 0 to %d, got %s", what, max, kindName(n))
		return 0
	}
	return v
}

func (p *parser) list(n *yaml.Node, what string, fn func(v *yaml.Node)) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.SequenceNode {
		p.errf(n, "%s: want a list, got %s", what, kindName(n))
		return
	}
	for _, e := range n.Content {
		fn(e)
	}
}

// descriptorFields are envoyproxy/ratelimit's keys of one descriptor.
var descriptorFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric", "value_to_metric", "quota_mode", "share_threshold", "metadata"}

func (p *parser) descriptors(n *yaml.Node, parent *Node) {
	p.list(n, "descriptors", func(d *yaml.Node) { p.descriptor(d, parent) })
}

func (p *parser) descriptor(n *yaml.Node, parent *Node) {
	var key, value string
	var hasValue, shadow, detailed, v2m bool
	var rl, children *yaml.Node
	p.fields(n, "descriptor", descriptorFields, func(k string, v *yaml.Node) {
		switch k {
		case "key":
			key = p.str(v, k)
		case "value":
			value, hasValue = p.str(v, k), true
		case "rate_limit":
			rl = v
		case "descriptors":
			children = v
		case "shadow_mode":
			shadow = p.bool(v, k)
		case "detailed_metric":
			detailed = p.bool(v, k)
		case "value_to_metric":
			v2m = p.bool(v, k)
		case "quota_mode", "share_threshold":
			p.errf(v, "%s is not supported by rls (see README.md, Envoy)", k)
		case "metadata":
			// Response dynamic metadata is not produced: accepted, unused.
		}
	})
	if key == "" {
		p.errf(n, "descriptor has empty key")
		return
	}
	hasValue = hasValue && value != ""
	finalKey := key
	if hasValue {
		finalKey = key + "_" + value
	}
	node := newNode(parent.fullKey + "." + finalKey)
	node.ValueToMetric = v2m
	node.value = value
	if !p.attach(n, parent, key, value, hasValue, node) {
		return
	}
	if rl != nil {
		node.Limit = p.rateLimit(rl, node.fullKey, shadow, detailed)
	}
	if children != nil {
		p.descriptors(children, node)
	}
}

// attach puts node under parent, rejecting a duplicate.
func (p *parser) attach(n *yaml.Node, parent *Node, key, value string, hasValue bool, node *Node) bool {
	dup := false
	switch {
	case hasValue && strings.Contains(value, "*"):
		for _, w := range parent.wild {
			dup = dup || (w.key == key && strings.Join(w.parts, "*") == value)
		}
		if !dup {
			parent.wild = append(parent.wild, wildNode{key: key, parts: strings.Split(value, "*"), node: node})
		}
	case hasValue:
		k := [2]string{key, value}
		if dup = parent.byValue[k] != nil; !dup {
			parent.byValue[k] = node
		}
	default:
		if dup = parent.byKey[key] != nil; !dup {
			parent.byKey[key] = node
		}
	}
	if dup {
		p.errf(n, "duplicate descriptor composite key '%s'", node.fullKey)
	}
	return !dup
}
