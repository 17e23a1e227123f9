package pop_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memstore"
	"github.com/poplimit/poplimit/pop"
)

// A limiter in front of a handler: 2 requests per second per client IP,
// the store in process (cmd/edge uses memcached through mcproxy).
func ExampleLimiter_Middleware() {
	store := memstore.New()
	l, err := pop.New(pop.Config{
		NewShared: func(lim counter.Limit) (counter.Allower, error) { return counter.New(store, lim) },
		NewLocal:  func(lim counter.Limit) (counter.Allower, error) { return counter.NewLocal(lim) },
		Clock:     func() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) },
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	err = l.LoadBytes("inline.yml", []byte(`version: 1
headers: draft11
tiers:
  free: {limits: [{name: burst, algorithm: fixed_window, quantity: 2, window: 1s}]}
policies:
  - {name: api, routes: ["GET /api/"], identity: [ip], tier: free}
`))
	if err != nil {
		panic(err)
	}
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") }))
	for i := 0; i < 3; i++ {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/items", nil))
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After"), rec.Body.String())
	}
	// Output:
	// 200 "burst";r=1;t=1  hello
	// 200 "burst";r=0;t=1  hello
	// 429 "burst";r=0;t=1 1 {"error":"rate_limit_exceeded","retry_after":1}
}

// The library in a few lines: Open counts in the PoP's memcached through
// the host's mcproxy (Store: store.Config{Memcached:
// []string{"127.0.0.1:7411"}}); here the zero store.Config counts in
// process. The policy: 2 requests per second per client IP.
func ExampleOpen() {
	serve(os.Stdout, pop.Options{})
	// Output:
	// 200 "burst";r=1;t=1
	// 200 "burst";r=0;t=1
	// 429 "burst";r=0;t=1
}

// exampleDoc is ExampleOpen's policy (Options.Policy names a file).
const exampleDoc = `version: 1
headers: draft11
tiers:
  free: {limits: [{name: burst, algorithm: fixed_window, quantity: 2, window: 1s}]}
policies:
  - {name: api, routes: ["GET /api/"], identity: [ip], tier: free}
`

// serve opens a Limiter with o and exampleDoc, and writes the status and
// RateLimit header of three requests to w. TestOpenMemcached runs it
// against real memcached.
func serve(w io.Writer, o pop.Options) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o.PolicyDoc = []byte(exampleDoc)
	o.Config.Clock = func() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) }
	o.Config.Logger = slog.New(slog.DiscardHandler)
	l, err := pop.Open(ctx, o)
	if err != nil {
		panic(err)
	}
	h := l.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/items", nil))
		fmt.Fprintln(w, rec.Code, rec.Header().Get("RateLimit"))
	}
}
