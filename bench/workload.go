package bench

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// ErrBadWorkload reports an invalid WorkloadConfig.
var ErrBadWorkload = errors.New("bench: invalid workload")

// Kind classifies a client of a workload.
type Kind int

const (
	// Legit clients offer less than their limit on average.
	Legit Kind = iota
	// Abusive clients offer 2–10× their limit.
	Abusive
	// BoundaryAttacker sends a full allowance just before a window ends and
	// another just after it starts (the fixed-window boundary attack).
	boundaryAttacker
	// credentialStuffer is one source of a credential-stuffing botnet on the login
	// route.
	credentialStuffer
)

var kindNames = [...]string{"legit", "abusive", "boundary", "stuffer"}

// String returns the kind's lower-case name.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// MarshalText implements encoding.TextMarshaler (JSON shows the name).
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// arrivals names an arrival process.
type arrivals int

const (
	// Poisson arrivals: exponential gaps at a constant mean rate.
	Poisson arrivals = iota
	// Bursty arrivals: an on/off process; during "on" periods the rate is
	// the mean divided by the on fraction, "off" periods are silent. The
	// mean rate is the same as Poisson's.
	Bursty
)

// Route is a class of requests, limited by one policy rule.
type Route struct {
	// Path is the HTTP path requests use, e.g. "/api" or "/login".
	Path string
	// Quantity and Window are the limit per identity on this route.
	Quantity int64
	Window   time.Duration
	// FailClosed rejects (503) when the store is down; else fail open.
	FailClosed bool
	// Refund: rejected requests consume nothing (counter.Refund); else they
	// count (counter.Count, Cloudflare's behaviour: an abuser stays
	// blocked while it keeps sending).
	Refund bool
}

// Rate returns the limit as requests per second.
func (r Route) Rate() float64 { return float64(r.Quantity) / r.Window.Seconds() }

// Client is one identity of a trace.
type Client struct {
	// ID is the identity (API key or user) the client presents.
	ID string `json:"id"`
	// Kind says how it behaves.
	Kind Kind `json:"kind"`
	// Route indexes Trace.Routes.
	Route int `json:"route"`
	// Multiple is its mean offered rate divided by its limit's rate.
	Multiple float64 `json:"multiple"`
}

// Request is one arrival of a trace.
type Request struct {
	// At is the offset from the start of the trace.
	At time.Duration
	// Client indexes Trace.Clients.
	Client int32
}

// Trace is a seeded, reproducible list of arrivals sorted by time.
type Trace struct {
	Seed     uint64
	Duration time.Duration
	Routes   []Route
	Clients  []Client
	Requests []Request
}

// OfferedBy returns the number of requests per client.
func (t *Trace) offeredBy() []int64 {
	out := make([]int64, len(t.Clients))
	for _, r := range t.Requests {
		out[r.Client]++
	}
	return out
}

// WorkloadConfig describes a mixed workload. Zero means default for every
// field.
type WorkloadConfig struct {
	// Seed makes the trace reproducible; default 1.
	Seed uint64
	// Duration of the trace; default 30s.
	Duration time.Duration
	// API is the main route; default /api, 20 per 1s.
	API Route
	// Login is the fail-closed login route; default /login, 5 per 1s,
	// FailClosed.
	Login Route
	// Legit is the number of legitimate clients; default 20. Their rates
	// follow a Zipf law: the i-th busiest offers LegitMax/(i+1)^ZipfS of its
	// limit, never less than LegitMin.
	Legit int
	// LegitMin and LegitMax bound legitimate multiples; default 0.05 and 0.8.
	LegitMin, LegitMax float64
	// ZipfS is the Zipf exponent of legitimate rates; default 1.1.
	ZipfS float64
	// Abusive is the number of abusive clients; default 2. Their multiples
	// are uniform in [AbuseMin, AbuseMax], default 2 and 10.
	Abusive            int
	AbuseMin, AbuseMax float64
	// Boundary is the number of window-boundary attackers; default 1; -1
	// means none.
	Boundary int
	// Stuffers is the number of credential-stuffing sources on the login
	// route, each at StuffMultiple (default 3) times the login limit;
	// default 4; -1 means none.
	Stuffers      int
	StuffMultiple float64
	// arrivals is the arrival process of legitimate and abusive clients.
	Arrivals arrivals
	// OnFraction is the share of time a Bursty client is on; default 0.25.
	OnFraction float64
	// MaxRequests bounds the trace; default 2,000,000.
	MaxRequests int
}

func (c WorkloadConfig) withDefaults() WorkloadConfig {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Duration <= 0 {
		c.Duration = 30 * time.Second
	}
	if c.API.Quantity == 0 {
		c.API = Route{Path: "/api", Quantity: 20, Window: time.Second}
	}
	if c.Login.Quantity == 0 {
		c.Login = Route{Path: "/login", Quantity: 5, Window: time.Second, FailClosed: true}
	}
	if c.Legit == 0 {
		c.Legit = 20
	}
	def(&c.LegitMin, 0.05)
	def(&c.LegitMax, 0.8)
	def(&c.ZipfS, 1.1)
	if c.Abusive == 0 {
		c.Abusive = 2
	}
	def(&c.AbuseMin, 2)
	def(&c.AbuseMax, 10)
	if c.Boundary == 0 {
		c.Boundary = 1
	}
	if c.Stuffers == 0 {
		c.Stuffers = 4
	}
	def(&c.StuffMultiple, 3)
	def(&c.OnFraction, 0.25)
	if c.MaxRequests <= 0 {
		c.MaxRequests = 2_000_000
	}
	return c
}

// Generate builds the trace described by c. The same config always yields
// the same trace.
func Generate(c WorkloadConfig) (*Trace, error) {
	c = c.withDefaults()
	if c.API.Window <= 0 || c.Login.Window <= 0 || c.API.Quantity < 0 || c.Login.Quantity < 0 {
		return nil, fmt.Errorf("%w: routes need a positive quantity and window", ErrBadWorkload)
	}
	if c.AbuseMin > c.AbuseMax || c.LegitMin > c.LegitMax || c.OnFraction > 1 {
		return nil, fmt.Errorf("%w: min above max or on fraction above 1", ErrBadWorkload)
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x9e3779b97f4a7c15))
	t := &Trace{Seed: c.Seed, Duration: c.Duration, Routes: []Route{c.API, c.Login}}
	add := func(k Kind, route int, mult float64) int32 {
		t.Clients = append(t.Clients, Client{
			ID: fmt.Sprintf("%s-%03d", k, len(t.Clients)), Kind: k, Route: route, Multiple: mult,
		})
		return int32(len(t.Clients) - 1)
	}
	for i := 0; i < c.Legit; i++ {
		m := math.Max(c.LegitMin, c.LegitMax/math.Pow(float64(i+1), c.ZipfS))
		id := add(Legit, 0, m)
		t.Arrive(rng, c.Arrivals, c.OnFraction, id, m*c.API.Rate())
	}
	for i := 0; i < c.Abusive; i++ {
		m := c.AbuseMin + rng.Float64()*(c.AbuseMax-c.AbuseMin)
		id := add(Abusive, 0, m)
		t.Arrive(rng, c.Arrivals, c.OnFraction, id, m*c.API.Rate())
	}
	for i := 0; i < c.Boundary; i++ {
		id := add(boundaryAttacker, 0, 0)
		n := t.boundaryAttack(id, c.API, 4)
		t.Clients[id].Multiple = float64(n) / (c.API.Rate() * c.Duration.Seconds())
	}
	for i := 0; i < c.Stuffers; i++ {
		id := add(credentialStuffer, 1, c.StuffMultiple)
		t.Arrive(rng, Poisson, 1, id, c.StuffMultiple*c.Login.Rate())
	}
	if len(t.Requests) > c.MaxRequests {
		return nil, fmt.Errorf("%w: %d requests exceed MaxRequests %d", ErrBadWorkload, len(t.Requests), c.MaxRequests)
	}
	t.Sort()
	return t, nil
}

func (t *Trace) Sort() {
	sort.SliceStable(t.Requests, func(i, j int) bool {
		if t.Requests[i].At != t.Requests[j].At {
			return t.Requests[i].At < t.Requests[j].At
		}
		return t.Requests[i].Client < t.Requests[j].Client
	})
}

// arrive appends the arrivals of one client at mean rate per second.
func (t *Trace) Arrive(rng *rand.Rand, a arrivals, onFraction float64, id int32, rate float64) {
	if rate <= 0 {
		return
	}
	end := t.Duration.Seconds()
	switch a {
	case Bursty:
		// Alternate on and off periods with exponential lengths whose mean
		// on period lasts about 20 arrivals.
		onRate := rate / onFraction
		meanOn := 20 / onRate
		meanOff := meanOn * (1 - onFraction) / onFraction
		at := rng.ExpFloat64() * meanOff
		for at < end {
			stop := at + rng.ExpFloat64()*meanOn
			for at += rng.ExpFloat64() / onRate; at < stop && at < end; at += rng.ExpFloat64() / onRate {
				t.Requests = append(t.Requests, Request{At: seconds(at), Client: id})
			}
			at = stop + rng.ExpFloat64()*meanOff
		}
	default:
		for at := rng.ExpFloat64() / rate; at < end; at += rng.ExpFloat64() / rate {
			t.Requests = append(t.Requests, Request{At: seconds(at), Client: id})
		}
	}
}

// boundaryAttack sends the full allowance in the last tenth of a window and
// again in the first tenth of the next, every period windows. It returns the
// number of requests added.
func (t *Trace) boundaryAttack(id int32, r Route, period int) int {
	n := 0
	slot := r.Window / 10
	for w := time.Duration(1); (w+1)*r.Window <= t.Duration; w += time.Duration(period) {
		edge := w * r.Window
		for i := int64(0); i < r.Quantity; i++ {
			off := slot * time.Duration(i) / time.Duration(r.Quantity)
			t.Requests = append(t.Requests,
				Request{At: edge - slot + off, Client: id},
				Request{At: edge + off, Client: id})
			n += 2
		}
	}
	return n
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// zipf picks identities 0..n-1 with probability proportional to 1/(i+1)^s,
// for load tests over a large key space. It is not safe for concurrent use;
// give each goroutine its own.
type zipf struct{ z *rand.Zipf }

// NewZipf returns a Zipf sampler over n identities with exponent s > 1,
// seeded for reproducibility.
func NewZipf(seed uint64, s float64, n uint64) (*zipf, error) {
	if s <= 1 || n == 0 {
		return nil, fmt.Errorf("%w: zipf needs s > 1 and n > 0", ErrBadWorkload)
	}
	z := rand.NewZipf(rand.New(rand.NewPCG(seed, 1)), s, 1, n-1)
	return &zipf{z: z}, nil
}

// Next returns the next identity.
func (z *zipf) Next() uint64 { return z.z.Uint64() }
