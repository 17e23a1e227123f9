package bench

import (
	"errors"
	"testing"
)

func TestFirstErrorKeepsTheFirst(t *testing.T) {
	var f firstError
	f.set(nil)
	f.set(errors.New("a"))
	f.set(errors.New("b"))
	if f.err == nil || f.err.Error() != "a" {
		t.Fatalf("first error %v", f.err)
	}
}
