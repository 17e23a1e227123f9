package pop

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestStoreCtx(t *testing.T) {
	parent, cancelParent := context.WithCancel(context.Background())
	defer cancelParent()
	c := newStoreCtx(parent, time.Now().Add(30*time.Millisecond))
	if d, ok := c.Deadline(); !ok || time.Until(d) > 30*time.Millisecond {
		t.Fatalf("deadline %v %v", d, ok)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("before the deadline: %v", err)
	}
	select {
	case <-c.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("Done not closed after the deadline")
	}
	if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after the deadline: %v", err)
	}
	c.release()

	// The parent's earlier deadline and its cancellation win.
	early, cancelEarly := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancelEarly()
	c = newStoreCtx(early, time.Now().Add(time.Hour))
	if d, _ := c.Deadline(); time.Until(d) > time.Second {
		t.Fatalf("deadline %v: want the parent's", d)
	}
	c = newStoreCtx(parent, time.Now().Add(time.Hour))
	cancelParent()
	<-c.Done()
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("after the parent's cancel: %v", c.Err())
	}
	c.release()
}

// One decision on an in-process store makes no context allocation.
func TestStoreCtxAllocs(t *testing.T) {
	ctx := context.Background()
	n := testing.AllocsPerRun(100, func() {
		c := newStoreCtx(ctx, time.Now().Add(time.Second))
		if c.Err() != nil {
			t.Fatal("expired")
		}
		c.release()
	})
	if n > 1 {
		t.Fatalf("%.0f allocations per store context; want at most 1", n)
	}
}

// A context derived from a storeCtx (as net.Dialer.DialContext derives
// one) and still alive when the decision releases it sees Done closed
// with an error: Err must not be nil then, or the derived context's
// propagation goroutine panics ("missing cancel error"; seen once in
// BenchmarkFullPath/pipe with a dial in the decision).
func TestStoreCtxReleasedHasAnError(t *testing.T) {
	c := newStoreCtx(context.Background(), time.Now().Add(time.Hour))
	child, cancel := context.WithCancel(c)
	defer cancel()
	c.release()
	select {
	case <-child.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("derived context not canceled by the release")
	}
	if !errors.Is(c.Err(), context.Canceled) || !errors.Is(child.Err(), context.Canceled) {
		t.Fatalf("after release: Err %v, derived %v; want Canceled", c.Err(), child.Err())
	}
}
