package pop

import (
	"github.com/poplimit/poplimit/pop/policy"
	"net/http"
)

// Reasons of the key checks a policy source with key states enables.
const (
	// ReasonKeyInactive: the request's API key has a record marked
	// inactive (revoked). Rejected with 403: not a quota answer.
	ReasonKeyInactive Reason = "key_inactive"
	// ReasonKeyUnknown: the request's API key has no record while the
	// file says unknown keys are refused (File.RejectUnknownKeys): 401.
	ReasonKeyUnknown Reason = "key_unknown"
)

// LoadPolicy installs f, a File built by a policy source (pop/pgpolicy)
// rather than parsed from YAML: f must not be modified afterwards. On
// error the current snapshot stays in place. A source validates what it
// builds (policy.Parse of a generated document does); LoadPolicy compiles it
// as LoadBytes does.
func (l *Limiter) LoadPolicy(f *policy.File) error {
	if f == nil {
		return l.loaded("", ErrNoPolicy)
	}
	return l.install(f)
}

// writeKeyRejection answers a key check's refusal: 403
// {"error":"api_key_inactive"} or 401 {"error":"api_key_unknown"}.
func writeKeyRejection(w http.ResponseWriter, status int) {
	msg := "api_key_inactive"
	if status == http.StatusUnauthorized {
		msg = "api_key_unknown"
	}
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(status)
	w.Write([]byte(`{"error":"` + msg + `"}` + "\n"))
}
