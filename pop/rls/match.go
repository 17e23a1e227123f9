package rls

import "strings"

// Entry is one (key, value) of a request descriptor.
type Entry struct{ Key, Value string }

// Match finds the limit of the request descriptor entries in domain, as
// envoyproxy/ratelimit does: at each level the entry's key and value, else
// the first wildcard value of that key matching it (in file order), else
// the key alone; the limit is the one of the node reached by the last
// entry (a descriptor deeper or shallower than the config matches
// nothing). statsKey is the key of its statistics: the node's path, the
// request's own keys and values with detailed_metric, or the path with the
// request's values where value_to_metric is set.
func (c *Config) Match(domain string, entries []Entry) (l *Limit, statsKey string) {
	n := c.Domains[domain]
	if n == nil || len(entries) == 0 {
		return nil, ""
	}
	useV2M := false
	for i, e := range entries {
		next, how := n.child(e)
		if next == nil {
			return nil, ""
		}
		useV2M = useV2M || (how != byValue && next.ValueToMetric && e.Value != "")
		if i == len(entries)-1 {
			if next.Limit == nil {
				return nil, ""
			}
			l = next.Limit
			switch {
			case l.DetailedMetric:
				return l, detailedKey(domain, entries)
			case useV2M:
				return l, c.valueToMetricKey(domain, entries)
			}
			return l, l.FullKey
		}
		if !next.hasChildren() {
			return nil, ""
		}
		n = next
	}
	return nil, ""
}

// valueToMetricKey is the statistics key of a match through a
// value_to_metric node (entries matched all the way): the node path,
// with the request's value after each key matched by value or marked
// value_to_metric, and the pattern after each wildcard.
func (c *Config) valueToMetricKey(domain string, entries []Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	n := c.Domains[domain]
	for _, e := range entries {
		next, how := n.child(e)
		b.WriteByte('.')
		b.WriteString(e.Key)
		switch {
		case how == byValue || (next.ValueToMetric && e.Value != ""):
			b.WriteByte('_')
			b.WriteString(e.Value)
		case how == byWildcard:
			b.WriteByte('_')
			b.WriteString(next.value)
		}
		n = next
	}
	return b.String()
}

const (
	byValue = iota
	byWildcard
	byKey
)

func (n *Node) child(e Entry) (*Node, int) {
	if c := n.byValue[[2]string{e.Key, e.Value}]; c != nil {
		return c, byValue
	}
	for _, w := range n.wild {
		if w.key == e.Key && globMatch(w.parts, e.Value) {
			return w.node, byWildcard
		}
	}
	if c := n.byKey[e.Key]; c != nil {
		return c, byKey
	}
	return nil, 0
}

func (n *Node) hasChildren() bool {
	return len(n.byValue) > 0 || len(n.byKey) > 0 || len(n.wild) > 0
}

// globMatch reports whether v matches the pattern whose literal parts
// (split at each '*') are parts: it starts with the first, ends with the
// last and holds the middle ones in order, without overlap.
func globMatch(parts []string, v string) bool {
	if len(parts) == 1 {
		return parts[0] == v
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(v) < len(first)+len(last) || !strings.HasPrefix(v, first) || !strings.HasSuffix(v, last) {
		return false
	}
	mid := v[len(first) : len(v)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(mid, p)
		if i < 0 {
			return false
		}
		mid = mid[i+len(p):]
	}
	return true
}

// detailedKey is domain.key_value.key_value… (a key with an empty value
// without the _): the statistics key of detailed_metric and of a
// request-level limit.
func detailedKey(domain string, entries []Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}
