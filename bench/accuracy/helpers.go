package accuracy

import (
	"time"

	"gonum.org/v1/plot/vg"
)

const chartW, chartH = 8 * vg.Inch, 4 * vg.Inch

// defaultTo sets *v to def when it is zero or negative: the "zero means
// default" rule of every Config in this package.
func defaultTo[T int | int64 | uint64 | float64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
