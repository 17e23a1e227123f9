package bench

import "os"

// WorkDir is a run's directory for configurations and logs: dir, created
// if missing and kept; or, when dir is empty, a new temporary directory
// named after prefix that done removes. done is never nil.
func WorkDir(dir, prefix string) (path string, done func(), err error) {
	if dir != "" {
		return dir, func() {}, os.MkdirAll(dir, 0o755)
	}
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", func() {}, err
	}
	return d, func() { os.RemoveAll(d) }, nil
}
