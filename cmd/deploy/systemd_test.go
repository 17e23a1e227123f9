package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/poplimit/poplimit/bench/fixture"
)

// units are the systemd units of systemd/, by the binary they run.
var units = []string{"mcproxy", "edge", "rls"}

// hardening are the directives every unit must carry, as written.
var hardening = []string{
	"DynamicUser=yes", "NoNewPrivileges=yes", "ProtectSystem=strict", "Restart=on-failure",
	"ExecReload=/bin/kill -HUP $MAINPID", "LimitNOFILE=1048576", "CapabilityBoundingSet=",
}

// TestSystemdUnits runs systemd-analyze verify on each unit of systemd/,
// with ExecStart pointed at the binary built from this module (verify
// fails when ExecStart is not executable). What it proves: the unit
// parses, every directive and value is one this systemd knows (verify
// prints a warning for an unknown key or a bad value, and any output fails
// the test), the hardening directives are there, and every --flag of
// ExecStart is one the binary's --help lists.
func TestSystemdUnits(t *testing.T) {
	analyze := fixture.LookPath(t, "systemd-analyze")
	dir := t.TempDir()
	for _, name := range units {
		t.Run(name, func(t *testing.T) {
			text, err := os.ReadFile(filepath.Join("systemd", name+".service"))
			if err != nil {
				t.Fatal(err)
			}
			unit := string(text)
			for _, d := range hardening {
				if !strings.Contains(unit, "\n"+d+"\n") {
					t.Errorf("%s.service lacks %q", name, d)
				}
			}
			exe := "/usr/local/bin/" + name
			args := execStart(t, unit, exe)
			bin := fixture.Binary(t, name)
			checkFlags(t, bin, args)
			copy := filepath.Join(dir, name+".service")
			if err := os.WriteFile(copy, []byte(strings.ReplaceAll(unit, exe, bin)), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := verify(analyze, copy); err != nil || out != "" {
				t.Errorf("systemd-analyze verify %s.service: %v\n%s", name, err, out)
			}
		})
	}
}

// TestSystemdVerifyCatchesMistakes: the check above can fail: a misspelled
// directive and a binary that does not exist are reported.
func TestSystemdVerifyCatchesMistakes(t *testing.T) {
	analyze := fixture.LookPath(t, "systemd-analyze")
	dir := t.TempDir()
	for doc, want := range map[string]string{
		"[Service]\nExecStart=/bin/true\nRestart=on-failur\n":  "restart",
		"[Service]\nExecStart=/bin/true\nNoNewPrivilege=yes\n": "Unknown key",
		"[Service]\nExecStart=/nonexistent/edge\n":             "not executable",
	} {
		path := filepath.Join(dir, "bad.service")
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := verify(analyze, path); !strings.Contains(out, want) {
			t.Errorf("verify of %q: %v %q, want it to say %q", doc, err, out, want)
		}
	}
}

// verify runs systemd-analyze verify on path: its output and exit error.
func verify(analyze, path string) (string, error) {
	cmd := exec.Command(analyze, "verify", path)
	cmd.Dir = filepath.Dir(path)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// execStart is the arguments of the unit's one ExecStart line, which must
// run exe.
func execStart(t *testing.T, unit, exe string) []string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
			lines = append(lines, v)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%d ExecStart lines, want 1", len(lines))
	}
	f := strings.Fields(lines[0])
	if f[0] != exe {
		t.Fatalf("ExecStart runs %s, want %s", f[0], exe)
	}
	return f[1:]
}

var flagName = regexp.MustCompile(`^--([a-z0-9-]+)`)

// checkFlags: every --flag of args is listed by bin --help.
func checkFlags(t *testing.T, bin string, args []string) {
	t.Helper()
	help, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --help: %v", bin, err)
	}
	for _, a := range args {
		if m := flagName.FindStringSubmatch(a); m != nil && !regexp.MustCompile(`(?m)^\s+--`+m[1]+`\b`).Match(help) {
			t.Errorf("ExecStart flag --%s is not in %s --help", m[1], filepath.Base(bin))
		}
	}
}
