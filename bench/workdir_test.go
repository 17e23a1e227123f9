package bench

import (
	"os"
	"path/filepath"
	"testing"
)

// A --dir that does not exist yet is created and kept; without one, the
// temporary directory is gone once the run is done.
func TestWorkDirCreatesAndKeepsAGivenDir(t *testing.T) {
	want := filepath.Join(t.TempDir(), "runs", "edge")
	dir, done, err := WorkDir(want, "x-")
	if err != nil || dir != want {
		t.Fatalf("WorkDir(%q): %q, %v", want, dir, err)
	}
	done()
	if fi, err := os.Stat(want); err != nil || !fi.IsDir() {
		t.Fatalf("the given directory after done: %v", err)
	}
	tmp, done, err := WorkDir("", "popbench-test-")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); err != nil {
		t.Fatal(err)
	}
	done()
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("the temporary directory after done: %v", err)
	}
}
