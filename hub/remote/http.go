package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// Reasons of hub events (audit) about remote operations.
const (
	EventLogsRequested = "LogsRequested"
	EventExec          = "Exec"
	EventExecExited    = "ExecExited"
	// EventRequestRefused: the device refused a request as
	// unauthenticated (schema.CodeUnauthenticated), the hub's own or one
	// someone else published on its requests topic; a Warning.
	EventRequestRefused = "RequestRefused"
)

// Reasons in schema.Status.Reason the API has no constant for.
const (
	reasonTooManyRequests = "TooManyRequests"
	reasonTimeout         = "Timeout"
	reasonBadGateway      = "BadGateway"
)

// Register adds the remote routes to the API.
func (m *Manager) Register(s *api.Server) {
	s.Handle("/v1/devices/{device}/pods/{pod}/log", api.Methods{http.MethodGet: m.serveLogs})
	s.Handle("/v1/devices/{device}/pods/{pod}/exec", api.Methods{http.MethodPost: m.serveExec})
	s.Handle("/v1/devices/{device}/top", api.Methods{http.MethodGet: m.serveTop})
	s.Handle("/v1/top", api.Methods{http.MethodGet: m.serveTopList})
	s.Handle("/v1/devices/{device}/crashreports", api.Methods{http.MethodGet: m.serveCrashReports})
}

// who describes the request's credential for audit events:
// "admin (admin) from 127.0.0.1:5555".
func who(r *http.Request) string {
	c, _ := api.CredentialFrom(r.Context())
	return fmt.Sprintf("%s (%s) from %s", c.Name, c.Role, r.RemoteAddr)
}

// admin answers 403 unless the request's credential is an admin.
func admin(w http.ResponseWriter, r *http.Request, what string) bool {
	c, _ := api.CredentialFrom(r.Context())
	if c.Role == store.RoleAdmin {
		return true
	}
	api.WriteStatus(w, api.NewStatus(http.StatusForbidden, api.ReasonForbidden,
		fmt.Sprintf("credential %q (role %s) may not %s: admin only", c.Name, c.Role, what), nil))
	return false
}

// device looks the path's device up; it answers 404 if it is not
// registered.
func (m *Manager) device(w http.ResponseWriter, r *http.Request) (name, uid string, ok bool) {
	name = r.PathValue("device")
	uid, _, ok = m.model.Device(name)
	if !ok {
		api.WriteStatus(w, api.NewStatus(http.StatusNotFound, api.ReasonNotFound, fmt.Sprintf("device %q not found", schema.Truncate(name, 64, "...")), nil))
	}
	return name, uid, ok
}

// offlineMessage says since when a device is offline.
func offlineMessage(device string, lastSeen time.Time) string {
	if lastSeen.IsZero() {
		return fmt.Sprintf("device %s is offline (never seen)", device)
	}
	return fmt.Sprintf("device %s is offline (last seen %s ago)", device, ago(time.Since(lastSeen)))
}

// ago rounds a duration for people: 45s, 3m, 2h5m, 3d.
func ago(d time.Duration) string {
	switch {
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	default:
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	}
}

// audit records a hub event on the device, and the request in the
// hub's audit trail.
func (m *Manager) audit(r *http.Request, device, uid, reason, msg string) {
	m.model.AddHubEvent(device, uid, schema.Event{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindEvent},
		Device:   device, Time: time.Now().UTC(), Type: schema.EventNormal, Reason: reason, Message: msg,
	})
	action := map[string]string{EventLogsRequested: "logs", EventExec: "exec", EventExecExited: "exec-ended"}[reason]
	api.AuditRequest(r.Context(), schema.AuditEntry{
		Action: action, Object: "devices/" + device + "/pods/" + r.PathValue("pod"), Result: schema.AuditOK, Detail: msg,
	})
}

// statusForCode maps a device's error code to the HTTP answer.
func statusForCode(device string, r *schema.Response) schema.Status {
	msg := fmt.Sprintf("device %s: %s", device, r.Error)
	if strings.HasPrefix(r.Error, "device "+device+" ") {
		msg = r.Error // the hub's own words already name it
	}
	if r.Error == "" {
		msg = fmt.Sprintf("device %s: %s", device, r.Code)
	}
	switch r.Code {
	case schema.CodeBadRequest:
		return api.NewStatus(http.StatusBadRequest, api.ReasonBadRequest, msg, nil)
	case schema.CodeNotFound:
		return api.NewStatus(http.StatusNotFound, api.ReasonNotFound, msg, nil)
	case schema.CodeNotRunning:
		return api.NewStatus(http.StatusConflict, api.ReasonConflict, msg, nil)
	case schema.CodeTooManyRequests:
		return api.NewStatus(http.StatusTooManyRequests, reasonTooManyRequests, msg, nil)
	case schema.CodeUnavailable:
		return api.NewStatus(http.StatusServiceUnavailable, api.ReasonServiceUnavailable, msg, nil)
	case schema.CodeTimeout:
		return api.NewStatus(http.StatusGatewayTimeout, reasonTimeout, msg, nil)
	case schema.CodeUnauthenticated:
		return api.NewStatus(http.StatusBadGateway, schema.ReasonRequestRefused,
			msg+" (the device acts only on requests signed by the hub key it pinned, within its clock's tolerance)", nil)
	}
	return api.NewStatus(http.StatusBadGateway, reasonBadGateway, msg, nil)
}

// refused records that the device refused the hub's own request as
// unauthenticated: a Warning hub event on the device and, with the HTTP
// request that asked (r, nil for top lists), an audit entry.
func (m *Manager) refused(r *http.Request, device, uid, op string, resp *schema.Response) {
	st := statusForCode(device, resp)
	m.model.AddHubEvent(device, uid, schema.Event{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindEvent},
		Device:   device, Time: time.Now().UTC(), Type: schema.EventWarning, Reason: EventRequestRefused,
		Message: fmt.Sprintf("device %s refused the hub's %s request as unauthenticated: %s", device, op, schema.Truncate(resp.Error, 300, "...")),
	})
	if r != nil {
		auditRefused(r, device, op, st)
	}
}

// auditRefused records the refusal in the hub's audit trail: action
// "{op}-refused", result the HTTP code the client got.
func auditRefused(r *http.Request, device, op string, st schema.Status) {
	obj := "devices/" + device
	if pod := r.PathValue("pod"); pod != "" {
		obj += "/pods/" + pod
	}
	api.AuditRequest(r.Context(), schema.AuditEntry{Action: op + "-refused", Object: obj, Result: strconv.Itoa(st.Code), Detail: st.Message})
}

// forgedRefused records, at most once per logEvery per device, that the
// device refused a request the hub did not send: a Warning hub event.
func (m *Manager) forgedRefused(device string, resp *schema.Response) {
	key := "forged/" + device
	now := time.Now()
	m.logMu.Lock()
	if now.Sub(m.lastLog[key]) < logEvery {
		m.logMu.Unlock()
		return
	}
	m.lastLog[key] = now
	m.logMu.Unlock()
	uid, _, ok := m.model.Device(device)
	if !ok {
		return
	}
	m.model.AddHubEvent(device, uid, schema.Event{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindEvent},
		Device:   device, Time: now.UTC(), Type: schema.EventWarning, Reason: EventRequestRefused,
		Message: fmt.Sprintf("device %s refused a request the hub did not send (someone else publishes on its requests topic): %s",
			device, schema.Truncate(resp.Error, 300, "...")),
	})
}

// statusForErr maps a failure before the first answer.
func statusForErr(device, what string, err error, timeout time.Duration) (schema.Status, string) {
	switch {
	case errors.Is(err, errNoAnswer):
		return api.NewStatus(http.StatusGatewayTimeout, reasonTimeout,
			fmt.Sprintf("device %s did not answer the %s request within %s", device, what, timeout), nil), "timeout"
	case errors.Is(err, errStopping):
		return api.NewStatus(http.StatusServiceUnavailable, api.ReasonServiceUnavailable, err.Error(), nil), "canceled"
	case errors.Is(err, errUnreachable):
		return api.NewStatus(http.StatusServiceUnavailable, api.ReasonServiceUnavailable, err.Error(), nil), "unreachable"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return api.NewStatus(http.StatusServiceUnavailable, api.ReasonServiceUnavailable, err.Error(), nil), "canceled"
	}
	return api.NewStatus(http.StatusBadGateway, reasonBadGateway, fmt.Sprintf("device %s: %v", device, err), nil), "cutoff"
}

// resultOf names a final response's result for the metrics.
func resultOf(r *schema.Response) string {
	if r.Code != "" {
		return strings.ToLower(r.Code)
	}
	return "ok"
}

// query reads the typed query parameters of a request; the first error
// names its parameter.
type query struct {
	v   map[string][]string
	err error
}

func (q *query) str(name string) string {
	if vs := q.v[name]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

func (q *query) fail(name, format string, args ...any) {
	if q.err == nil {
		q.err = &schema.ValidationError{Errors: []schema.FieldError{{Field: name, Message: fmt.Sprintf(format, args...)}}}
	}
}

func (q *query) boolean(name string) bool {
	s := q.str(name)
	if s == "" {
		return false
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		q.fail(name, "%q: want true or false", schema.Truncate(s, 64, "..."))
	}
	return b
}

// count reads an integer ≥ 0; set reports whether it was given.
func (q *query) count(name string) (n int64, set bool) {
	s := q.str(name)
	if s == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		q.fail(name, "%q: want a number ≥ 0", schema.Truncate(s, 64, "..."))
		return 0, false
	}
	return n, true
}

func (q *query) name(name string, required bool) string {
	s := q.str(name)
	if s == "" && !required {
		return ""
	}
	if err := schema.ValidateName(s); err != nil {
		q.fail(name, "%v", err)
	}
	return s
}

// stopped reports whether the manager was stopped.
func (m *Manager) stopped() bool {
	select {
	case <-m.stop:
		return true
	default:
		return false
	}
}
