package rls

import (
	"io"
	"net/http"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxJSONBody bounds a /json request body.
const maxJSONBody = 1 << 20

// jsonUsage is the answer to a /json request that is not a POST.
const jsonUsage = `POST a RateLimitRequest in protobuf JSON, e.g.
curl -s -d '{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}' http://HOST:PORT/json`

// JSONHandler is envoyproxy/ratelimit's /json endpoint: a POSTed
// RateLimitRequest in protobuf JSON is answered with the RateLimitResponse
// in JSON, status 429 when the overall code is OVER_LIMIT, 200 otherwise;
// a body that does not parse (or is over 1 MiB) or a refused request is
// 400; a method other than POST is 405 with a usage line.
func (s *Service) JSONHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, jsonUsage, http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
		var req rlv3.RateLimitRequest
		if err == nil {
			err = protojson.Unmarshal(body, &req)
		}
		if err != nil {
			http.Error(w, "Bad Request: "+err.Error()+"\n"+jsonUsage, http.StatusBadRequest)
			return
		}
		resp, err := s.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			http.Error(w, "Bad Request: "+err.Error(), http.StatusBadRequest)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.OverallCode == rlv3.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	})
}

// HealthHandler is /healthcheck: 200 "OK" once a config is loaded, else
// 500. A store outage does not fail it: the rules' fail modes answer then
// (the breaker's state is in /metrics), and taking every rls of a PoP out
// of rotation would leave Envoy's failure_mode_deny as the only answer.
func (s *Service) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if msg := s.unhealthy(); msg != "" {
			http.Error(w, msg, http.StatusInternalServerError)
			return
		}
		w.Write([]byte("OK"))
	})
}

// unhealthy is why the service is unhealthy, "" when it is not.
func (s *Service) unhealthy() string {
	if s.cur.Load() == nil {
		return "no rate limit configuration loaded"
	}
	return ""
}

// Healthy reports whether /healthcheck answers OK (for the gRPC health
// service).
func (s *Service) Healthy() bool { return s.unhealthy() == "" }
