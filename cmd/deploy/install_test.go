package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/poplimit/poplimit/bench/fixture"
)

// installCommand is what make build runs to put the commands in bin/ (the
// README's install section for a clone).
const installCommand = "GOBIN=$(CURDIR)/bin $(GO) install -trimpath -buildvcs=auto ./cmd/..."

// TestInstallFromCleanClone: a fresh git clone of this checkout's HEAD,
// installed as make build does, gives every command, and each prints its
// version with the clone's commit. Uncommitted changes of the checkout are
// not in the clone: it tests the last commit.
func TestInstallFromCleanClone(t *testing.T) {
	git := fixture.LookPath(t, "git")
	root := moduleRoot(t)
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		t.Skip("not a git checkout: nothing to clone")
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil || !strings.Contains(string(makefile), "\t"+installCommand+"\n") {
		t.Fatalf("Makefile's build target no longer runs %q: update this test with it", installCommand)
	}
	readme, _ := os.ReadFile(filepath.Join(root, "README.md"))
	for _, want := range []string{"go install github.com/poplimit/poplimit/cmd/...@latest", "make build"} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("README's install section lacks %q", want)
		}
	}
	clone := filepath.Join(t.TempDir(), "poplimit")
	if out, err := exec.Command(git, "clone", "--quiet", root, clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	rev, err := exec.Command(git, "-C", clone, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(clone, "bin")
	install := exec.Command("go", "install", "-trimpath", "-buildvcs=auto", "./cmd/...")
	// GOFLAGS: this machine's go env turns VCS stamping off, a user's does not.
	install.Env = append(os.Environ(), "GOBIN="+bin, "GOFLAGS=-buildvcs=auto", "GOPROXY=off")
	install.Dir = clone
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install ./cmd/...: %v\n%s", err, out)
	}
	names := []string{"edge", "mcproxy", "popbench"}
	if _, err := os.Stat(filepath.Join(clone, "cmd", "rls")); err == nil {
		names = append(names, "rls")
	}
	for _, name := range names {
		out, err := exec.Command(filepath.Join(bin, name), "--version").CombinedOutput()
		v := strings.TrimSpace(string(out))
		if err != nil || !strings.HasPrefix(v, name+" version ") || !strings.Contains(v, "(commit "+strings.TrimSpace(string(rev))) || !strings.Contains(v, "go1.") {
			t.Errorf("%s --version: %q %v, want %q with commit %s and the Go version", name, v, err, name+" version ...", rev)
		}
		if strings.Contains(v, "modified") {
			t.Errorf("%s --version says modified for a clean clone: %q", name, v)
		}
		t.Log(v)
	}
}
