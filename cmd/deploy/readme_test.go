package deploy

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The README's package table names every package of the module, once, with
// the module packages it imports, as go list reports them.
func TestREADMEPackageTableIsGoList(t *testing.T) {
	const mod = "github.com/poplimit/poplimit/"
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	want := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		var imps []string
		for _, i := range f[1:] {
			if p, ok := strings.CutPrefix(i, mod); ok {
				imps = append(imps, p)
			}
		}
		want[strings.TrimPrefix(f[0], mod)] = imps
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "| package | owns | imports (of poplimit) |")
	if !ok {
		t.Fatal("README.md: no package table")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	code := regexp.MustCompile("`([^`]+)`")
	seen := map[string]bool{}
	for _, row := range strings.Split(table, "\n")[2:] {
		cells := strings.Split(strings.Trim(row, "| "), " | ")
		if len(cells) != 3 {
			t.Errorf("README.md: a package row of %d cells: %q", len(cells), row)
			continue
		}
		for _, m := range code.FindAllStringSubmatch(cells[0], -1) {
			p := m[1]
			imps, known := want[p]
			if !known || seen[p] {
				t.Errorf("README.md: package %q is not in go list, or listed twice", p)
				continue
			}
			seen[p] = true
			if cells[2] == "their packages" {
				continue
			}
			var got []string
			for _, m := range code.FindAllStringSubmatch(cells[2], -1) {
				got = append(got, m[1])
			}
			if !slices.Equal(got, imps) {
				t.Errorf("README.md: %s imports %v, go list says %v", p, got, imps)
			}
		}
	}
	for p := range want {
		if !seen[p] {
			t.Errorf("README.md: no row for package %s", p)
		}
	}
}
