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
const installCommand = "GOBIN=$(CURDIR)/bin $(GO) install -buildvcs=auto ./cmd/..."

// TestInstallFromCleanClone: installed as make build does, the checkout
// gives every command, and each prints its version with the checkout's
// commit, "modified" exactly when the tree has uncommitted changes. A git
// worktree (.git is a file) gets no VCS stamp from the go command, so
// there the test installs from a fresh clone of HEAD (slower: the
// module's packages compile again under the clone's path).
func TestInstallFromCleanClone(t *testing.T) {
	git := fixture.LookPath(t, "git")
	root := moduleRoot(t)
	fi, err := os.Stat(filepath.Join(root, ".git"))
	if err != nil {
		t.Skip("not a git checkout: no commit to print")
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
	src := root
	if !fi.IsDir() {
		src = filepath.Join(t.TempDir(), "poplimit")
		if out, err := exec.Command(git, "clone", "--quiet", root, src).CombinedOutput(); err != nil {
			t.Fatalf("git clone: %v\n%s", err, out)
		}
	}
	rev, err := exec.Command(git, "-C", src, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	status, err := exec.Command(git, "-C", src, "status", "--porcelain", "--untracked-files=no").Output()
	if err != nil {
		t.Fatal(err)
	}
	dirty := len(strings.TrimSpace(string(status))) > 0
	bin := t.TempDir()
	install := exec.Command("go", "install", "-buildvcs=auto", "./cmd/...")
	// GOFLAGS: this machine's go env turns VCS stamping off, a user's does not.
	install.Env = append(os.Environ(), "GOBIN="+bin, "GOFLAGS=-buildvcs=auto", "GOPROXY=off")
	install.Dir = src
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install ./cmd/...: %v\n%s", err, out)
	}
	names := []string{"edge", "mcproxy", "popbench"}
	if _, err := os.Stat(filepath.Join(src, "cmd", "rls")); err == nil {
		names = append(names, "rls")
	}
	for _, name := range names {
		out, err := exec.Command(filepath.Join(bin, name), "--version").CombinedOutput()
		v := strings.TrimSpace(string(out))
		if err != nil || !strings.HasPrefix(v, name+" version ") || !strings.Contains(v, "(commit "+strings.TrimSpace(string(rev))) || !strings.Contains(v, "go1.") {
			t.Errorf("%s --version: %q %v, want %q with commit %s and the Go version", name, v, err, name+" version ...", rev)
		}
		if strings.Contains(v, "modified") != dirty {
			t.Errorf("%s --version: %q, but the tree's uncommitted changes: %v", name, v, dirty)
		}
		t.Log(v)
	}
}
