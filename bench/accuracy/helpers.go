package accuracy

import (
	"sync"
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

// firstError keeps the first non-nil error it is given. Safe for
// concurrent use; read err after the writers are done.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (f *firstError) set(err error) {
	if err == nil {
		return
	}
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
}
