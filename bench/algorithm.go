package bench

import (
	"fmt"

	"github.com/poplimit/poplimit/counter"
)

// AlgorithmName returns the short name of an algorithm.
func AlgorithmName(a counter.Algorithm) string {
	switch a {
	case counter.FixedWindow:
		return "fixed"
	case counter.TokenBucket:
		return "token"
	}
	return "sliding"
}

// ParseAlgorithm is the inverse of AlgorithmName.
func ParseAlgorithm(s string) (counter.Algorithm, error) {
	switch s {
	case "sliding", "":
		return counter.SlidingWindow, nil
	case "fixed":
		return counter.FixedWindow, nil
	case "token":
		return counter.TokenBucket, nil
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q (sliding, fixed, token)", ErrBadWorkload, s)
}
