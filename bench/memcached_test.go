package bench

import (
	"testing"
	"time"
)

func TestMemcachedStartStop(t *testing.T) {
	ms := MemcachedForTest(t, 2)
	if ms[0].Addr == ms[1].Addr {
		t.Fatalf("two processes share %s", ms[0].Addr)
	}
	for _, m := range ms {
		if err := Ping(m.Addr, time.Second); err != nil {
			t.Fatalf("ping %s: %v", m.Addr, err)
		}
	}
	ms[0].Stop()
	if err := Ping(ms[0].Addr, 200*time.Millisecond); err == nil {
		t.Fatalf("%s still answers after Stop", ms[0].Addr)
	}
	ms[0].Stop() // idempotent
}

func TestMemcachedPauseResume(t *testing.T) {
	m := MemcachedForTest(t, 1)[0]
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := Ping(m.Addr, 100*time.Millisecond); err == nil {
		t.Fatal("paused memcached answered")
	}
	if err := m.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := Ping(m.Addr, time.Second); err != nil {
		t.Fatalf("resumed memcached: %v", err)
	}
}
