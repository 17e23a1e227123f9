package memcached

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// TestMuxHoldsBackWhileInFlight: with one write awaiting its reply (the
// default MuxInFlight), the calls that arrive meanwhile are held back and
// then go in ONE write, each answered with its own reply; a call on a
// quiet connection goes at once. The server is a loopback listener of the
// test that answers incr with a running count, and holds the first reply
// until the others are queued.
func TestMuxHoldsBackWhileInFlight(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	release := make(chan struct{})
	served := make(chan error, 1)
	const later = 9 // calls made while the first is in flight
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		r, w := bufio.NewReader(c), bufio.NewWriter(c)
		for i := 0; i < 1+later+1; i++ {
			l, err := r.ReadString('\n')
			if err != nil {
				served <- err
				return
			}
			if i == 0 {
				<-release
			}
			var key string
			var delta int
			if _, err := fmt.Sscanf(l, "incr %s %d\r\n", &key, &delta); err != nil {
				served <- fmt.Errorf("request %q: %v", l, err)
				return
			}
			fmt.Fprintf(w, "%d\r\n", 100+i)
			if r.Buffered() == 0 {
				w.Flush()
			}
		}
		served <- nil
	}()

	var wire WireCounter
	p := NewPipeStore(PipeConfig{Addr: ln.Addr().String(), Timeout: 10 * time.Second, Multiplex: 1, Wire: &wire})
	defer p.Close()
	ctx := context.Background()
	type res struct {
		v   uint64
		err error
	}
	first := make(chan res, 1)
	go func() { v, err := p.Incr(ctx, "k0", 1); first <- res{v, err} }()
	// The first call is written (and held by the server) before the others.
	waitFor(t, "the first write", func() bool { return wire.Writes() >= 1 })
	results := make(chan res, later)
	for i := 0; i < later; i++ {
		go func() { v, err := p.Incr(ctx, fmt.Sprintf("k%d", i+1), 1); results <- res{v, err} }()
	}
	// All of them are waiting: one in the writer, the rest in its queue.
	mc := p.mux[0].mc
	waitFor(t, "the later calls to queue", func() bool { return len(mc.queue) >= later-1 })
	close(release)
	if r := <-first; r.err != nil || r.v != 100 {
		t.Fatalf("first call: %d %v", r.v, r.err)
	}
	seen := map[uint64]bool{}
	for i := 0; i < later; i++ {
		r := <-results
		if r.err != nil || r.v < 101 || r.v > 100+later || seen[r.v] {
			t.Fatalf("held-back call: %d %v (seen %v)", r.v, r.err, seen)
		}
		seen[r.v] = true
	}
	if got := wire.Writes(); got != 2 {
		t.Fatalf("%d writes for 1 + %d calls, want 2 (the held-back calls in one)", got, later)
	}
	// Quiet again: a lone call goes at once, one write of its own.
	if v, err := p.Incr(ctx, "k-last", 1); err != nil || v != 100+later+1 {
		t.Fatalf("lone call: %d %v", v, err)
	}
	if got := wire.Writes(); got != 3 {
		t.Fatalf("%d writes after the lone call, want 3", got)
	}
	if err := <-served; err != nil && !strings.Contains(err.Error(), "closed") {
		t.Fatal(err)
	}
}

// waitFor polls cond every millisecond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
