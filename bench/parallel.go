package bench

import "sync"

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
