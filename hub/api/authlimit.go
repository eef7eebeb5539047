package api

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/fleetmq/fleet/broker/ratelimit"
	"github.com/fleetmq/fleet/hub/store"
)

// ReasonTooManyRequests is the Reason of a 429: the client's address
// failed to authenticate too often.
const ReasonTooManyRequests = "TooManyRequests"

// checkToken authenticates a bearer token under the auth limiter: an
// address that failed too often gets 429 with Retry-After, its token
// unchecked (unless it worked before: see ratelimit.AuthLimiter), and a
// wrong token 401. It writes the answer when it returns false.
//
// The source is the connection's address: behind a reverse proxy every
// client shares the proxy's, so there the proxy should limit instead.
func (s *Server) checkToken(w http.ResponseWriter, r *http.Request, token string) (store.Credential, bool) {
	attempt, wait, ok := s.limiter.Admit(ratelimit.Source(r.RemoteAddr), []byte(token))
	if !ok {
		secs := int64(math.Ceil(wait.Seconds()))
		w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
		WriteStatus(w, NewStatus(http.StatusTooManyRequests, ReasonTooManyRequests,
			fmt.Sprintf("too many failed logins from this address: retry in %v", time.Duration(max(secs, 1))*time.Second), nil))
		s.authFailed(r, http.StatusTooManyRequests, "too many failed logins from this address: refused unchecked") // audit.go
		return store.Credential{}, false
	}
	cred, ok := s.store.Authenticate(token)
	if !ok {
		attempt.Failed()
		WriteStatus(w, NewStatus(http.StatusUnauthorized, ReasonUnauthorized, "wrong bearer token", nil))
		s.authFailed(r, http.StatusUnauthorized, "wrong bearer token")
		return store.Credential{}, false
	}
	attempt.Succeeded()
	return cred, true
}
