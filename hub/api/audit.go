package api

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// The audit trail (hub/API.md, "Audit trail"): authenticate records
//
//   - every request that is not a read (apply, create, update, delete,
//     token and credential changes, rollbacks, exec) that succeeds, with
//     its answer, one entry each;
//   - aggregated (store.AuditAggregator: the first at once, then one
//     entry a minute with the count, per actor, source, action and
//     result): the uses of each credential, failed authentications (401,
//     429), refused requests (403 and every other 4xx);
//
// Handlers add what only they know with noteAudit; hub/remote records
// log and exec requests with Audit. Every entry is stored (store.AppendAudit)
// and logged as one structured line, msg "audit".

// AuditThrottle is the window of aggregated entries.
const AuditThrottle = store.DefaultAuditWindow

// maxAuditField bounds the object and detail of an entry: they may come
// from the request.
const maxAuditField = 512

type auditKey struct{}

// auditState is what a request's context carries for its audit entry.
type auditState struct {
	srv      *Server
	mu       sync.Mutex
	actor    string
	role     string
	source   string
	object   string
	detail   string
	recorded bool
}

// noteAudit sets the object (if not "") and detail of the request's audit
// entry: what only the handler knows (the name of a created object, what
// an apply changed).
func noteAudit(r *http.Request, object, detail string) {
	a, ok := r.Context().Value(auditKey{}).(*auditState)
	if !ok {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if object != "" {
		a.object = object
	}
	a.detail = detail
}

// Audit records an entry on behalf of the request whose context ctx is:
// its actor, role and source are filled in. The request then gets no entry
// of its own. hub/remote records log and exec requests with it; e.Action
// names the verb, e.Result is schema.AuditOK or an HTTP code.
func (s *Server) Audit(ctx context.Context, e schema.AuditEntry) {
	if a, ok := ctx.Value(auditKey{}).(*auditState); ok {
		a.mu.Lock()
		e.Actor, e.Role, e.Source = a.actor, a.role, a.source
		a.recorded = true
		a.mu.Unlock()
	}
	if e.Actor == "" {
		e.Actor = schema.AuditAnonymous
	}
	s.record(e)
}

// AuditRequest records e on behalf of the request whose context ctx is,
// as Server.Audit does; it reports false, recording nothing, if ctx is
// not one of an authenticated request.
func AuditRequest(ctx context.Context, e schema.AuditEntry) bool {
	a, ok := ctx.Value(auditKey{}).(*auditState)
	if !ok {
		return false
	}
	a.srv.Audit(ctx, e)
	return true
}

// record stores and logs one entry. A failure to store it is logged: the
// request it describes has happened.
func (s *Server) record(e schema.AuditEntry) {
	e.Object = clip(e.Object)
	e.Detail = clip(e.Detail)
	if e.Result == "" {
		e.Result = schema.AuditOK
	}
	// The entry is stored even if the client went away: it is about what
	// happened, not about the client.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stored, err := s.store.AppendAudit(ctx, e)
	if err != nil {
		s.log.Error("audit entry not stored", "err", err, "actor", e.Actor, "action", e.Action, "object", e.Object)
	} else {
		e = stored
	}
	s.log.Info("audit", "seq", e.Seq, "actor", e.Actor, "role", e.Role, "source", e.Source,
		"action", e.Action, "object", e.Object, "result", e.Result, "detail", e.Detail)
}

func clip(s string) string {
	if len(s) <= maxAuditField {
		return s
	}
	return strings.ToValidUTF8(s[:maxAuditField], "") + "…"
}

// sourceOf is the client's address without its port.
func sourceOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// resultOf is the audit result of an HTTP status code.
func resultOf(code int) string {
	if code < 400 {
		return schema.AuditOK
	}
	return strconv.Itoa(code)
}

// describe names a request's action and object from its route.
func describe(r *http.Request) (action, object string) {
	pattern := r.Pattern
	if _, p, ok := strings.Cut(pattern, " "); ok {
		pattern = p
	}
	verb := map[string]string{
		http.MethodGet: "get", http.MethodHead: "get", http.MethodPost: "create",
		http.MethodPut: "update", http.MethodDelete: "delete",
	}[r.Method]
	if verb == "" {
		verb = strings.ToLower(r.Method)
	}
	pv := r.PathValue
	switch pattern {
	case "/v1/apply":
		return "apply", ""
	case "/v1/audit/verify":
		return "verify", "audit"
	case "/v1/{kind}":
		if verb == "get" {
			verb = "list"
		}
		return verb, pv("kind")
	case "/v1/{kind}/{name}":
		return verb, pv("kind") + "/" + pv("name")
	case "/v1/devices/{name}/token":
		return "issue-token", "devices/" + pv("name")
	case "/v1/devices/{name}/rekey":
		return "rekey", "devices/" + pv("name")
	case "/v1/credentials/{name}":
		return verb, "credentials/" + pv("name")
	case "/v1/bootstrap-tokens/{id}":
		return verb, "bootstrap-tokens/" + pv("id")
	case "/v1/deployments/{name}/rollback":
		return "rollback", "deployments/" + pv("name")
	case "/v1/devices/{device}/pods/{pod}/exec":
		return "exec", "devices/" + pv("device") + "/pods/" + pv("pod")
	case "/v1/devices/{device}/pods/{pod}/log":
		return "logs", "devices/" + pv("device") + "/pods/" + pv("pod")
	}
	return verb, strings.TrimPrefix(r.URL.Path, "/v1/")
}

// aggregate records e through the aggregator (store.AuditAggregator):
// events anyone can cause in bulk become at most two entries per actor,
// source, action and result a minute, with their count.
func (s *Server) aggregate(e schema.AuditEntry) {
	for _, x := range s.agg.Add(e) {
		s.record(x)
	}
}

// FlushAudit records the aggregated entries whose window has ended (all
// of them, if all) and prunes the trail past its bounds.
func (s *Server) FlushAudit(ctx context.Context, all bool) {
	for _, x := range s.agg.Flush(all) {
		s.record(x)
	}
	if err := s.store.PruneAudit(ctx); err != nil {
		s.log.Warn("audit trail not pruned", "err", err)
	}
}

// RunAudit flushes the aggregated audit entries every interval (default
// 10 s) until ctx is done, then all that are left: run it beside the
// server and stop it before the store closes.
func (s *Server) RunAudit(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = 10 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.FlushAudit(context.Background(), true)
			return
		case <-t.C:
			s.FlushAudit(ctx, false)
		}
	}
}

// authFailed records a request refused before its token was accepted
// (401, or 429 from the auth limiter), aggregated per address and code.
func (s *Server) authFailed(r *http.Request, code int, why string) {
	action, object := describe(r)
	s.aggregate(schema.AuditEntry{
		Actor: schema.AuditAnonymous, Source: sourceOf(r), Action: action, Object: object,
		Result: resultOf(code), Detail: why,
	})
}

// AuditAggregated records e, an event from outside the HTTP API that
// anyone can cause in bulk (a refused MQTT login), aggregated: a flood of
// guesses adds at most two entries a minute per actor, source, action and
// result, counting them all. Actor defaults to schema.AuditAnonymous;
// Actor and Source are clipped as Object is.
func (s *Server) AuditAggregated(e schema.AuditEntry) {
	e.Actor, e.Source = clip(e.Actor), clip(e.Source)
	if e.Actor == "" {
		e.Actor = schema.AuditAnonymous
	}
	s.aggregate(e)
}

// refused records a request of an authenticated credential refused with
// 403, aggregated.
func (s *Server) refused(r *http.Request, cred store.Credential, why string) {
	action, object := describe(r)
	s.aggregate(schema.AuditEntry{
		Actor: cred.Name, Role: cred.Role, Source: sourceOf(r), Action: action, Object: object,
		Result: resultOf(http.StatusForbidden), Detail: why,
	})
}

// used records the uses of a credential from an address, aggregated:
// the first in a minute, then how many more.
func (s *Server) used(r *http.Request, cred store.Credential) {
	s.aggregate(schema.AuditEntry{
		Actor: cred.Name, Role: cred.Role, Source: sourceOf(r), Action: "use-token", Result: schema.AuditOK,
		Detail: r.Method + " " + clip(r.URL.Path),
	})
}

// audited serves a request of an authenticated credential and records it
// unless it only reads or its handler recorded it (Audit).
func (s *Server) audited(h http.Handler, w http.ResponseWriter, r *http.Request, cred store.Credential) {
	a := &auditState{srv: s, actor: cred.Name, role: cred.Role, source: sourceOf(r)}
	r = r.WithContext(context.WithValue(r.Context(), auditKey{}, a))
	rec, ok := w.(*recorder)
	if !ok {
		rec = &recorder{ResponseWriter: w}
	}
	if isRead(r) {
		s.used(r, cred)
		h.ServeHTTP(rec, r)
		if rec.code == http.StatusForbidden {
			// Refused by the handler: a kind the role may not read.
			s.refused(r, cred, "refused by the handler")
		}
		return
	}
	h.ServeHTTP(rec, r)
	a.mu.Lock()
	done, object, detail := a.recorded, a.object, a.detail
	a.mu.Unlock()
	if done {
		return
	}
	code := rec.code
	if !rec.wrote {
		code = http.StatusOK
	}
	action, obj := describe(r)
	if object != "" {
		obj = object
	}
	if r.URL.Query().Get("dryRun") != "" {
		detail = strings.TrimSpace("dry run " + detail)
	}
	e := schema.AuditEntry{
		Actor: cred.Name, Role: cred.Role, Source: a.source, Action: action, Object: obj,
		Result: resultOf(code), Detail: detail,
	}
	if code >= 400 && code < 500 {
		// Refused: anyone with a token can cause these in bulk.
		s.aggregate(e)
		return
	}
	s.record(e)
}

// auditRoutes adds GET /v1/audit (admin only, see roles.go), POST
// /v1/audit/verify (auditverify.go) and GET /v1/deployments/{name}/status.
func (s *Server) auditRoutes() {
	s.Handle("/v1/audit", methods{http.MethodGet: s.listAudit})
	s.Handle("/v1/audit/verify", methods{http.MethodPost: s.verifyAudit})
	s.Handle("/v1/deployments/{name}/status", methods{http.MethodGet: s.deploymentStatus})
}

// listAudit handles GET /v1/audit?since=…&actor=…&limit=…: since is a
// duration back from now (1h) or an RFC 3339 time; limit defaults to
// schema.DefaultAuditLimit, 0 for all. Entries come oldest first. The
// aggregated counts so far are written before the trail is read (only
// an admin can, so no one else can make entries this way).
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var query store.AuditQuery
	if v := q.Get("since"); v != "" {
		t, err := parseSince(v, time.Now())
		if err != nil {
			WriteError(w, r, s.log, invalidParam("since", "%q: %v", schema.Truncate(v, 80, "..."), err))
			return
		}
		query.Since = t
	}
	query.Actor = q.Get("actor")
	query.Limit = schema.DefaultAuditLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			WriteError(w, r, s.log, invalidParam("limit", "%q: want a number ≥ 0", schema.Truncate(v, 80, "...")))
			return
		}
		query.Limit = n
	}
	// What is read is complete: the counts so far are written first.
	s.FlushAudit(r.Context(), true)
	items, err := s.store.Audit(r.Context(), query)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	WriteJSON(w, http.StatusOK, schema.AuditList{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "AuditList"},
		Items:    items,
	})
}

// parseSince reads a since parameter: a duration back from now ("90m")
// or an RFC 3339 time.
func parseSince(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("want a positive duration")
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("want a duration (1h) or an RFC 3339 time")
	}
	return t, nil
}
