package bench

import (
	"errors"
	"math"
	"reflect"
	"testing"
	"time"
)

func TestGenerateReproducible(t *testing.T) {
	a, err := Generate(WorkloadConfig{Seed: 7, Duration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(WorkloadConfig{Seed: 7, Duration: 10 * time.Second})
	c, _ := Generate(WorkloadConfig{Seed: 8, Duration: 10 * time.Second})
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed gave different traces")
	}
	if reflect.DeepEqual(a.Requests, c.Requests) {
		t.Fatal("different seeds gave the same trace")
	}
	for i := 1; i < len(a.Requests); i++ {
		if a.Requests[i].At < a.Requests[i-1].At {
			t.Fatalf("request %d out of order", i)
		}
	}
	if last := a.Requests[len(a.Requests)-1].At; last >= a.Duration {
		t.Fatalf("request at %v beyond duration %v", last, a.Duration)
	}
}

// TestGenerateRates checks every kind offers what it claims, within the
// statistical tolerance of a long trace.
func TestGenerateRates(t *testing.T) {
	for _, arr := range []arrivals{Poisson, Bursty} {
		tr, err := Generate(WorkloadConfig{Seed: 3, Duration: 200 * time.Second, Arrivals: arr, Abusive: 3, Stuffers: 2})
		if err != nil {
			t.Fatal(err)
		}
		offered := tr.offeredBy()
		kinds := map[Kind]int{}
		var sumGot, sumWant float64
		for i, c := range tr.Clients {
			kinds[c.Kind]++
			route := tr.Routes[c.Route]
			want := c.Multiple * route.Rate() * tr.Duration.Seconds()
			got := float64(offered[i])
			switch c.Kind {
			case Abusive:
				if c.Multiple < 2 || c.Multiple > 10 {
					t.Errorf("abusive multiple %v outside 2–10", c.Multiple)
				}
			case Legit:
				if c.Multiple >= 1 {
					t.Errorf("legit multiple %v not under the limit", c.Multiple)
				}
			case credentialStuffer:
				if c.Route != 1 {
					t.Errorf("stuffer on route %d, want login", c.Route)
				}
			}
			if c.Kind == boundaryAttacker {
				continue
			}
			sumGot += got
			sumWant += want
			// Poisson: sd = sqrt(want), allow 5 sd. Bursty clients have few
			// on periods each: only their sum is checked.
			if tol := 5*math.Sqrt(want) + 5; arr == Poisson && math.Abs(got-want) > tol {
				t.Errorf("%v %s: offered %v, want %v±%v", arr, c.ID, got, want, tol)
			}
		}
		if math.Abs(sumGot-sumWant) > 0.1*sumWant {
			t.Errorf("arrivals %v: offered %v in all, want %v±10%%", arr, sumGot, sumWant)
		}
		if kinds[Legit] != 20 || kinds[Abusive] != 3 || kinds[boundaryAttacker] != 1 || kinds[credentialStuffer] != 2 {
			t.Errorf("kinds %v", kinds)
		}
	}
}

func TestBoundaryAttackAroundEdges(t *testing.T) {
	tr, err := Generate(WorkloadConfig{Legit: -1, Abusive: -1, Stuffers: -1, Duration: 10 * time.Second,
		API: Route{Path: "/api", Quantity: 10, Window: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Clients) != 1 || tr.Clients[0].Kind != boundaryAttacker {
		t.Fatalf("clients %+v", tr.Clients)
	}
	// Every request is within a tenth of a window of a window edge, and a
	// fixed window admits them all: 2×quantity in a fifth of a window.
	for _, r := range tr.Requests {
		off := r.At % time.Second
		if off >= 100*time.Millisecond && off < 900*time.Millisecond {
			t.Fatalf("request at %v not near an edge", r.At)
		}
	}
	if len(tr.Requests) != 3*20 { // edges at 1s, 5s, 9s? 9s needs 10s: (w+1)·W ≤ D
		t.Fatalf("got %d requests", len(tr.Requests))
	}
}

func TestGenerateRejectsBadConfig(t *testing.T) {
	cases := map[string]WorkloadConfig{
		"abuse min>max": {AbuseMin: 5, AbuseMax: 3},
		"on fraction":   {OnFraction: 2},
		"too many":      {MaxRequests: 10},
	}
	for name, c := range cases {
		if _, err := Generate(c); !errors.Is(err, ErrBadWorkload) {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

func TestZipfSkewed(t *testing.T) {
	z, err := NewZipf(1, 1.2, 1000)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, 1000)
	for i := 0; i < 100000; i++ {
		counts[z.Next()]++
	}
	if counts[0] < 10*counts[99] || counts[0] < counts[1] {
		t.Fatalf("not skewed: %d %d %d", counts[0], counts[1], counts[99])
	}
	if _, err := NewZipf(1, 1, 10); !errors.Is(err, ErrBadWorkload) {
		t.Fatal("s=1 accepted")
	}
}
