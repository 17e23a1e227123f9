package pop

import (
	"crypto/sha256"
	"encoding/hex"
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

// KeyDigest is the lower-case hex SHA-256 digest of an API key (64
// characters): how File.Keys is keyed when File.KeyDigests is set, and
// how pop/pgpolicy stores keys. KeyID(k) is its first 24 characters.
func KeyDigest(apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return hex.EncodeToString(sum[:])
}

// lookupKey finds the record of apiKey, by digest when f.KeyDigests; keyID
// is KeyID(apiKey) when known.
func (f *File) lookupKey(apiKey string) (rec KeyRecord, keyID string, known bool) {
	if !f.KeyDigests {
		rec, known = f.Keys[apiKey]
		return rec, KeyID(apiKey), known
	}
	d := KeyDigest(apiKey)
	rec, known = f.Keys[d]
	return rec, d[:24], known
}

// LoadPolicy installs f, a File built by a policy source (pop/pgpolicy)
// rather than parsed from YAML: f must not be modified afterwards. On
// error the current snapshot stays in place. A source validates what it
// builds (pop.Parse of a generated document does); LoadPolicy compiles it
// as LoadBytes does.
func (l *Limiter) LoadPolicy(f *File) error {
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
