package pop_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop"
)

// A limiter in front of a handler: 2 requests per second per client IP,
// the store in process (cmd/edge uses memcached through mcproxy).
func ExampleLimiter_Middleware() {
	store := counter.NewMemoryStore()
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
