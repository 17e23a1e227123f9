package bench

import (
	"context"
	"sync"
)

// parallel calls fn(i) for every i in [0, n) on par goroutines (at least
// one) and waits for them. It stops handing out work once ctx ends and then
// returns ctx's error; fn sees ctx too and should give up early. fn must be
// safe for concurrent use.
func Parallel(ctx context.Context, n, par int, fn func(i int)) error {
	jobs := make(chan int)
	var wg sync.WaitGroup
	for g := 0; g < max(1, par); g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				fn(i)
			}
		}()
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return ctx.Err()
}

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
