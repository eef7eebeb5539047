package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fleetmq/fleet/broker/ratelimit"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// Options configure a Server. Store is required.
type Options struct {
	Store  *store.Store
	Logger *slog.Logger
	// BookmarkInterval is how often an idle watch stream gets a BOOKMARK;
	// default 15 s.
	BookmarkInterval time.Duration
	// WatchWriteTimeout bounds each write to a watch stream, so a client
	// that stopped reading is dropped; default 30 s.
	WatchWriteTimeout time.Duration
	// Status fills in the read-only status of devices and deployments in
	// GET, list and watch answers; nil leaves it out.
	Status StatusSource
	// ObserveRequest, if set, is called after every request with its
	// route pattern ("/v1/{kind}/{name}"), status code and duration.
	ObserveRequest func(route string, code int, d time.Duration)
	// Reserved reports MQTT usernames no credential may take; optional.
	Reserved ReservedNames
	// BootstrapTokenDeleted, if set, is called after a bootstrap token is
	// deleted, before the answer: the hub ends its MQTT sessions.
	BootstrapTokenDeleted func(id string)
	// AuthLimiter throttles failed bearer tokens per source address
	// (authlimit.go); default one with ratelimit's defaults.
	AuthLimiter *ratelimit.AuthLimiter
	// CAHash is the pin of the hub's own CA (schema.CAHash), returned
	// with each new bootstrap token; "" for none.
	CAHash string
	// HubVersion is the release the version-skew policy measures an
	// AgentRollout's spec.version against (schema.CheckAgentSkew);
	// default schema.BuildVersion().
	HubVersion string
	// CAHashFunc, if set, is asked instead of CAHash for each new token
	// (a hub whose CA rotates). Default none.
	CAHashFunc func() string
}

// StatusSource supplies the status the hub derives from agent reports.
type StatusSource interface {
	// DeviceStatusJSON returns the JSON of the device's
	// schema.DeviceObservedInfo, or nil.
	DeviceStatusJSON(name string) []byte
	// DeploymentStatusJSON returns the JSON of the deployment's
	// schema.DeploymentStatus, or nil.
	DeploymentStatusJSON(name string) []byte
}

// Server is the hub HTTP API. It is an http.Handler.
type Server struct {
	store *store.Store
	log   *slog.Logger
	opts  Options
	mux   *http.ServeMux

	stopOnce sync.Once
	stop     chan struct{}
	// agg aggregates the audit entries of token uses and refusals
	// (audit.go).
	agg store.AuditAggregator
	// limiter throttles failed logins (authlimit.go).
	limiter *ratelimit.AuthLimiter
	// registered lists the routes as registered (routelist.go).
	registered routeList
	// pageKey signs the continue tokens of list pages (pages.go).
	pageKey []byte
}

// New builds the API on the store.
func New(opts Options) (*Server, error) {
	if opts.Store == nil {
		return nil, errors.New("new api server: no store")
	}
	var err error
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.BookmarkInterval <= 0 {
		opts.BookmarkInterval = 15 * time.Second
	}
	if opts.WatchWriteTimeout <= 0 {
		opts.WatchWriteTimeout = 30 * time.Second
	}
	if opts.HubVersion == "" {
		opts.HubVersion = schema.BuildVersion()
	}
	s := &Server{
		store:   opts.Store,
		log:     opts.Logger,
		opts:    opts,
		mux:     http.NewServeMux(),
		stop:    make(chan struct{}),
		limiter: opts.AuthLimiter,
	}
	if s.limiter == nil {
		s.limiter = ratelimit.NewAuthLimiter(ratelimit.AuthOptions{})
	}
	s.agg.Now = time.Now
	if s.pageKey, err = newPageKey(); err != nil {
		return nil, err
	}
	s.routes()
	return s, nil
}

// Methods dispatches one path by method and answers 405 (with Allow) for
// the others. HEAD is served by the GET handler.
type Methods map[string]http.HandlerFunc

type methods = Methods

func (m Methods) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	if h, ok := m[method]; ok {
		h(w, r)
		return
	}
	allow := make([]string, 0, len(m))
	for k := range m {
		allow = append(allow, k)
	}
	sort.Strings(allow)
	w.Header().Set("Allow", strings.Join(allow, ", "))
	WriteStatus(w, NewStatus(http.StatusMethodNotAllowed, ReasonMethodNotAllowed,
		fmt.Sprintf("%s is not allowed on %s: use %s", r.Method, r.URL.Path, strings.Join(allow, " or ")), nil))
}

func (s *Server) routes() {
	s.HandlePublic("/healthz", methods{http.MethodGet: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	}})
	s.Handle("/v1/apply", methods{http.MethodPost: s.apply})
	s.Handle("/v1/{kind}", methods{http.MethodGet: s.listOrWatch, http.MethodPost: s.create})
	s.Handle("/v1/{kind}/{name}", methods{http.MethodGet: s.get, http.MethodPut: s.update, http.MethodDelete: s.delete})
	s.Handle("/v1/devices/{name}/token", methods{http.MethodPost: s.issueToken})
	s.Handle("/v1/devices:batch", methods{http.MethodPost: s.registerDevices})
	s.Handle("/v1/credentials", methods{http.MethodGet: s.listCredentials, http.MethodPost: s.createCredential})
	s.Handle("/v1/credentials/{name}", methods{http.MethodDelete: s.deleteCredential})
	s.bootstrapRoutes()
	s.revisionRoutes()
	s.auditRoutes()
	s.deviceKeyRoutes()
	s.openAPIRoutes()
	s.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteStatus(w, NewStatus(http.StatusNotFound, ReasonNotFound, "no such path "+r.URL.Path, nil))
	}))
}

// Handle registers a route behind bearer authentication and the roles
// of roles.go: only an admin may do anything but GET (and HEAD), a viewer
// may GET all but a few admin-only routes, a monitor only the routes
// listed in monitorReads. pattern is a net/http ServeMux pattern
// ("/metrics", "/v1/devices/{name}/status"); roles.go names routes by it.
// Every request is recorded in the audit trail as audit.go says.
func (s *Server) Handle(pattern string, h http.Handler) {
	s.mux.Handle(pattern, s.authenticate(h))
	s.registered.add(pattern, h, false)
}

// HandlePublic registers a route without authentication.
func (s *Server) HandlePublic(pattern string, h http.Handler) {
	s.mux.Handle(pattern, h)
	s.registered.add(pattern, h, true)
}

// StopStreams ends every watch stream; register it with
// http.Server.RegisterOnShutdown so Shutdown does not wait for them.
func (s *Server) StopStreams() {
	s.stopOnce.Do(func() { close(s.stop) })
}

// ServeHTTP logs the request and turns a panic into a 500.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &recorder{ResponseWriter: w}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
			if !rec.wrote {
				WriteStatus(rec, NewStatus(http.StatusInternalServerError, ReasonInternalError, "internal error", nil))
			}
		}
		d := time.Since(start)
		s.log.Debug("http request", "method", r.Method, "path", r.URL.Path, "code", rec.code, "duration", d)
		if s.opts.ObserveRequest != nil {
			route := r.Pattern
			if route == "" {
				route = "none"
			}
			code := rec.code
			if !rec.wrote {
				code = http.StatusOK
			}
			s.opts.ObserveRequest(route, code, d)
		}
	}()
	s.mux.ServeHTTP(rec, r)
}

type credKey struct{}

// CredentialFrom returns the operator that made the request.
func CredentialFrom(ctx context.Context) (store.Credential, bool) {
	c, ok := ctx.Value(credKey{}).(store.Credential)
	return c, ok
}

func (s *Server) authenticate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearer(r.Header.Get("Authorization"))
		if !ok {
			WriteStatus(w, NewStatus(http.StatusUnauthorized, ReasonUnauthorized, "missing bearer token: send Authorization: Bearer <token> (see admin.conf in the hub's data directory)", nil))
			s.authFailed(r, http.StatusUnauthorized, "missing bearer token")
			return
		}
		cred, ok := s.checkToken(w, r, token) // authlimit.go
		if !ok {
			return
		}
		if why := authorize(cred, r); why != "" {
			WriteStatus(w, NewStatus(http.StatusForbidden, ReasonForbidden, why, nil))
			s.refused(r, cred, why)
			return
		}
		ctx := context.WithValue(r.Context(), credKey{}, cred)
		ctx = store.WithActor(ctx, fmt.Sprintf("%s (%s)", cred.Name, cred.Role))
		s.audited(h, w, r.WithContext(ctx), cred)
	})
}

// bearer extracts the token of an "Authorization: Bearer <token>" header.
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// recorder remembers the status code for the access log.
type recorder struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.code, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.code, r.wrote = http.StatusOK, true
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
