package policy

// POLICY.md is the reference of the policy file. These tests keep it and
// the parser in step: every key its tables list is one the parser knows,
// every key the parser knows is listed, every listed key is used by a
// complete file in the document, and every such file parses.
//
// The document's conventions, which the tests read:
//   - a reference table starts with a "| Key |" header row; each row's
//     first cell is the key's path in backquotes, written as the parser's
//     error messages write fields, with "[]" for "each list entry" and
//     "<tier>" for a tier name;
//   - the last cell of such a row is a one-line YAML example of the key;
//   - a fenced block whose info string is "yaml policy-file" is a complete
//     policy file; the first one (under "A complete minimal file") is the
//     minimal file.

import (
	"errors"
	"fmt"
	"go/ast"
	goparser "go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const policyMD = "POLICY.md"

// docRow is one row of a reference table.
type docRow struct {
	line    int
	key     string // the key's path, e.g. tiers.<tier>.limits[].window
	example string // the last cell, backquotes removed
}

// docRows reads the reference tables of doc.
func docRows(t *testing.T, doc string) []docRow {
	t.Helper()
	var rows []docRow
	inTable := false
	for i, line := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(line, "| Key |"):
			inTable = true
		case !strings.HasPrefix(line, "|"):
			inTable = false
		case inTable && !strings.HasPrefix(line, "|---"):
			cells := strings.Split(strings.Trim(line, "|"), " | ")
			key := strings.TrimSpace(cells[0])
			if len(cells) < 2 || !strings.HasPrefix(key, "`") || !strings.HasSuffix(key, "`") {
				t.Errorf("%s:%d: a table row's first cell must be a key in backquotes: %q", policyMD, i+1, line)
				continue
			}
			ex := strings.Trim(strings.TrimSpace(cells[len(cells)-1]), "`")
			rows = append(rows, docRow{i + 1, strings.Trim(key, "`"), ex})
		}
	}
	return rows
}

// docFile is a fenced "yaml policy-file" block.
type docFile struct {
	line int
	text string
}

func docFiles(doc string) []docFile {
	var files []docFile
	var cur *docFile
	var b strings.Builder
	for i, line := range strings.Split(doc, "\n") {
		switch {
		case cur == nil && strings.TrimSpace(line) == "```yaml policy-file":
			cur = &docFile{line: i + 2}
			b.Reset()
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.text = b.String()
			files = append(files, *cur)
			cur = nil
		case cur != nil:
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return files
}

// nameMaps are the mappings whose keys are tier names, not fields.
var nameMaps = map[string]bool{"tiers": true, "policies[].overrides": true}

// overrideLimits is the path of an override's limits, which take exactly
// the fields of a tier's limits (the document lists them once).
const overrideLimits, tierLimits = "policies[].overrides.<tier>[]", "tiers.<tier>.limits[]"

func docPath(path string) string {
	if rest, ok := strings.CutPrefix(path, overrideLimits); ok {
		return tierLimits + rest
	}
	return path
}

// walkFields calls field for every key of every mapping under n, with the
// key's path in the document's notation, and fieldMap for every mapping
// whose keys are fields (not tier names), with its path.
func walkFields(n *yaml.Node, path string, field func(path string), fieldMap func(path string, n *yaml.Node)) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			walkFields(c, path, field, fieldMap)
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			walkFields(c, path+"[]", field, fieldMap)
		}
	case yaml.MappingNode:
		if !nameMaps[path] && fieldMap != nil {
			fieldMap(path, n)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			kp := join(path, n.Content[i].Value)
			if nameMaps[path] {
				kp = join(path, "<tier>")
			}
			field(kp)
			walkFields(n.Content[i+1], kp, field, fieldMap)
		}
	}
}

// probeFields returns, for every field mapping f uses, the fields the
// parser accepts there: an unknown key is added to each such mapping and
// the parser's "unknown field (known: ...)" error read back.
func probeFields(t *testing.T, f docFile) map[string][]string {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(f.text), &doc); err != nil {
		t.Fatalf("%s:%d: %v", policyMD, f.line, err)
	}
	probes := map[string]string{} // probe key -> mapping path
	walkFields(&doc, "", func(string) {}, func(path string, n *yaml.Node) {
		k := fmt.Sprintf("zzprobe%d", len(probes))
		probes[k] = path
		n.Content = append(n.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Value: k}, &yaml.Node{Kind: yaml.ScalarNode, Value: "x"})
	})
	data, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Parse("probe", data)
	known := map[string][]string{}
	for _, e := range flatten(err) {
		var ve *ValidationError
		if !errors.As(e, &ve) {
			t.Fatalf("probe: %v", e)
		}
		path, ok := probes[ve.Field[strings.LastIndex(ve.Field, ".")+1:]]
		list, isUnknown := strings.CutPrefix(ve.Msg, "unknown field (known: ")
		if !ok || !isUnknown {
			continue // another complaint about the probe's value
		}
		known[path] = strings.Split(strings.TrimSuffix(list, ")"), ", ")
	}
	for k, path := range probes {
		if _, ok := known[path]; !ok {
			t.Errorf("%s:%d: the parser did not reject the unknown field %s added at %q", policyMD, f.line, k, path)
		}
	}
	return known
}

func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err != nil {
		return []error{err}
	}
	return nil
}

// parserFieldLists returns the field lists the parser's source passes to
// parser.fields, each sorted and joined by ", ", with their positions.
func parserFieldLists(t *testing.T) map[string]string {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	lists := map[string]string{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		af, err := goparser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "fields" || len(call.Args) != 4 {
				return true
			}
			pos := fset.Position(call.Pos()).String()
			lit, ok := call.Args[2].(*ast.CompositeLit)
			if !ok {
				t.Errorf("%s: fields' known list is not a literal this test can read", pos)
				return true
			}
			var keys []string
			for _, e := range lit.Elts {
				bl, ok := e.(*ast.BasicLit)
				if !ok || bl.Kind != token.STRING {
					t.Errorf("%s: fields' known list has a non-string element", pos)
					continue
				}
				s, err := strconv.Unquote(bl.Value)
				if err != nil {
					t.Fatal(err)
				}
				keys = append(keys, s)
			}
			sort.Strings(keys)
			lists[strings.Join(keys, ", ")] = pos
			return true
		})
	}
	if len(lists) == 0 {
		t.Fatal("found no parser.fields calls: the parser changed shape, update this test")
	}
	return lists
}

func readPolicyDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(policyMD)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPolicyDocFilesParse: every complete file in POLICY.md, the minimal
// one first, is a valid policy file.
func TestPolicyDocFilesParse(t *testing.T) {
	doc := readPolicyDoc(t)
	files := docFiles(doc)
	minimal := strings.Index(doc, "## A complete minimal file")
	if len(files) < 2 || minimal < 0 || strings.Count(doc[:minimal], "\n")+1 > files[0].line {
		t.Fatalf("%s: want the minimal file as the first \"yaml policy-file\" block under its heading, and the annotated example; found %d blocks", policyMD, len(files))
	}
	for _, f := range files {
		if _, err := Parse(fmt.Sprintf("%s block at line %d", policyMD, f.line), []byte(f.text)); err != nil {
			t.Errorf("%s block at line %d does not parse:\n%v", policyMD, f.line, err)
		}
	}
}

// TestPolicyDocKeys: the keys POLICY.md's tables list are exactly the keys
// the parser knows, each used by one of the document's complete files, and
// each row's example is YAML setting that key.
func TestPolicyDocKeys(t *testing.T) {
	doc := readPolicyDoc(t)
	rows := docRows(t, doc)
	files := docFiles(doc)
	if len(rows) == 0 || len(files) == 0 {
		t.Fatalf("%s: no reference rows (%d) or policy-file blocks (%d)", policyMD, len(rows), len(files))
	}

	// What the parser knows: probe every field mapping the files use.
	knownAt := map[string][]string{}
	used := map[string]bool{}
	for _, f := range files {
		for path, keys := range probeFields(t, f) {
			knownAt[docPath(path)] = keys
		}
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(f.text), &n); err != nil {
			t.Fatalf("%s:%d: %v", policyMD, f.line, err)
		}
		walkFields(&n, "", func(p string) { used[docPath(p)] = true }, nil)
	}
	// ... and every field list in the parser's source was reached, so no
	// mapping the files do not exercise hides undocumented keys.
	probed := map[string]bool{}
	known := map[string]bool{}
	for path, keys := range knownAt {
		s := slices.Clone(keys)
		sort.Strings(s)
		probed[strings.Join(s, ", ")] = true
		for _, k := range keys {
			known[join(path, k)] = true
		}
	}
	for list, pos := range parserFieldLists(t) {
		if !probed[list] {
			t.Errorf("%s: the parser knows fields [%s] at a place no policy-file block of %s uses: use them in the annotated example and list them", pos, list, policyMD)
		}
	}

	documented := map[string]bool{}
	for _, r := range rows {
		if documented[r.key] {
			t.Errorf("%s:%d: %s is listed twice", policyMD, r.line, r.key)
		}
		documented[r.key] = true
		placeholder := strings.HasSuffix(r.key, "<tier>")
		if !placeholder && !known[r.key] {
			t.Errorf("%s:%d: %s is listed but the parser does not know it", policyMD, r.line, r.key)
		}
		if !used[r.key] {
			t.Errorf("%s:%d: %s is listed but no policy-file block uses it", policyMD, r.line, r.key)
		}
		var ex map[string]any
		if err := yaml.Unmarshal([]byte(r.example), &ex); err != nil || len(ex) != 1 {
			t.Errorf("%s:%d: example %q of %s is not one YAML key: value (%v)", policyMD, r.line, r.example, r.key, err)
			continue
		}
		last := strings.TrimSuffix(r.key[strings.LastIndex(r.key, ".")+1:], "[]")
		if _, ok := ex[last]; !ok && !placeholder {
			t.Errorf("%s:%d: example %q of %s does not set %s", policyMD, r.line, r.example, r.key, last)
		}
	}
	for k := range known {
		if !documented[k] {
			t.Errorf("the parser knows %s but %s does not list it: add a row to its table", k, policyMD)
		}
	}
}
