package dashboard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/hub/history"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// Defaults of Options.
const (
	// DefaultScanInterval: live updates reach the page within about half
	// a second of the hub knowing.
	DefaultScanInterval = 500 * time.Millisecond
	// DefaultHeartbeat is how often an idle stream gets a comment line,
	// so that the page (and any proxy) sees the connection is alive.
	DefaultHeartbeat = 15 * time.Second
	// DefaultAuthCheck is how often a stream checks that its token is
	// still accepted.
	DefaultAuthCheck = time.Second
)

// Options configure a Dashboard. Model and Store are required.
type Options struct {
	// Model is the hub's fleet model, read for devices and statuses.
	Model *fleetmodel.Model
	// Store is the hub's store: deployments are listed from it, and a
	// stream's token is checked against it.
	Store *store.Store
	// Logger; default discards.
	Logger *slog.Logger
	// Version is the hub's version, shown in the page; default "dev".
	Version string
	// ScanInterval is how often the fleet is compared with its last
	// snapshot while a live stream is open; default DefaultScanInterval.
	ScanInterval time.Duration
	// Heartbeat of idle streams; default DefaultHeartbeat.
	Heartbeat time.Duration
	// AuthCheck: how often a stream re-checks its token; default
	// DefaultAuthCheck.
	AuthCheck time.Duration
	// WriteTimeout bounds each write to a stream, so a page that stopped
	// reading is dropped; default 30 s.
	WriteTimeout time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// History is what the charts show (GET /v1/dashboard/history/...);
	// default an empty one, which nothing fills.
	History *history.History
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.ScanInterval <= 0 {
		o.ScanInterval = DefaultScanInterval
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.AuthCheck <= 0 {
		o.AuthCheck = DefaultAuthCheck
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 30 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.History == nil {
		o.History = history.New(history.Options{Now: o.Now})
	}
}

// Dashboard serves the web dashboard: its page and assets, the routes
// that page reads besides the API's own, and the live stream.
type Dashboard struct {
	opts    Options
	log     *slog.Logger
	tracker *tracker
	assets  *assets

	stopOnce sync.Once
	stopping chan struct{}
}

// New assembles a dashboard.
func New(opts Options) (*Dashboard, error) {
	if opts.Model == nil || opts.Store == nil {
		return nil, errors.New("new dashboard: Model and Store are required")
	}
	opts.setDefaults()
	a, err := loadAssets()
	if err != nil {
		return nil, err
	}
	st := opts.Store
	deps := func(ctx context.Context, fn func(string, []byte) error) error {
		_, err := st.ListRawNamed(ctx, schema.KindDeployment, fn)
		return err
	}
	return &Dashboard{
		opts: opts, log: opts.Logger, assets: a,
		tracker:  newTracker(opts.Model, deps, opts.ScanInterval, opts.Now, opts.Logger),
		stopping: make(chan struct{}),
	}, nil
}

// Router is where the dashboard adds its routes: *api.Server. Handle
// puts a route behind the API's bearer authentication (any credential
// may read, only an admin may write); HandlePublic does not.
type Router interface {
	Handle(pattern string, h http.Handler)
	HandlePublic(pattern string, h http.Handler)
}

var _ Router = (*api.Server)(nil)

// Register adds the dashboard's routes: the page at / and its assets
// under /ui/ (public: they hold no data), and under /v1/dashboard/ the
// session, summary, devices, stream and history routes (bearer token,
// like the API).
func (d *Dashboard) Register(r Router) {
	r.HandlePublic("/{$}", api.Methods{http.MethodGet: d.assets.serveIndex})
	r.HandlePublic("/ui/{file}", api.Methods{http.MethodGet: d.assets.serveFile})
	r.Handle("/v1/dashboard/session", api.Methods{http.MethodGet: d.serveSession})
	r.Handle("/v1/dashboard/summary", api.Methods{http.MethodGet: d.serveSummary})
	r.Handle("/v1/dashboard/devices", api.Methods{http.MethodGet: d.serveDevices})
	r.Handle("/v1/dashboard/stream", api.Methods{http.MethodGet: d.serveStream})
	r.Handle("/v1/dashboard/history/online", api.Methods{http.MethodGet: d.serveHistoryOnline})
	r.Handle("/v1/dashboard/history/devices/{name}", api.Methods{http.MethodGet: d.serveHistoryDevice})
	r.Handle("/v1/dashboard/history/deployments/{name}", api.Methods{http.MethodGet: d.serveHistoryDeployment})
}

// Stop ends every live stream (the pages reconnect) and the scans. Call
// it when the HTTP server shuts down, or it waits for the streams.
func (d *Dashboard) Stop() {
	d.stopOnce.Do(func() {
		close(d.stopping)
		d.tracker.stop()
	})
}

// StopOnClose returns ln, which calls Stop when it is closed: an
// http.Server's Shutdown closes its listeners first, then waits for the
// requests in flight, the streams among them.
func (d *Dashboard) StopOnClose(ln net.Listener) net.Listener {
	return &stopListener{Listener: ln, stop: d.Stop}
}

type stopListener struct {
	net.Listener
	stop func()
}

func (l *stopListener) Close() error {
	l.stop()
	return l.Listener.Close()
}

// Session is the answer of GET /v1/dashboard/session: who the token
// belongs to, and what the page may offer.
type Session struct {
	Name string `json:"name"`
	Role string `json:"role"`
	// ReadOnly: the credential may only read (role monitor); the page
	// shows no admin action.
	ReadOnly bool   `json:"readOnly"`
	Version  string `json:"version"`
	// StaleAfter is the hub's --stale-after, in seconds.
	StaleAfter float64 `json:"staleAfter"`
}

func (d *Dashboard) serveSession(w http.ResponseWriter, r *http.Request) {
	c, _ := api.CredentialFrom(r.Context())
	w.Header().Set("Cache-Control", "no-store")
	api.WriteJSON(w, http.StatusOK, Session{
		Name: c.Name, Role: c.Role, ReadOnly: c.Role != store.RoleAdmin, Version: d.opts.Version,
		StaleAfter: d.opts.Model.StaleAfter().Seconds(),
	})
}

// Summary is the answer of GET /v1/dashboard/summary.
type Summary struct {
	Counts Counts    `json:"counts"`
	Seq    uint64    `json:"seq"`
	Time   time.Time `json:"time"`
}

func (d *Dashboard) serveSummary(w http.ResponseWriter, r *http.Request) {
	s, err := d.tracker.current()
	if err != nil {
		api.WriteError(w, r, d.log, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	api.WriteJSON(w, http.StatusOK, Summary{Counts: s.counts, Seq: s.seq, Time: s.at.UTC()})
}

func (d *Dashboard) serveDevices(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r.URL.Query(), api.ParseSelector)
	if err != nil {
		var pe *paramError
		if errors.As(err, &pe) {
			err = &schema.ValidationError{Errors: []schema.FieldError{{Field: pe.param, Message: pe.msg}}}
		}
		api.WriteError(w, r, d.log, err)
		return
	}
	s, err := d.tracker.current()
	if err != nil {
		api.WriteError(w, r, d.log, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	api.WriteJSON(w, http.StatusOK, s.page(q))
}

// bearer extracts the token of an "Authorization: Bearer <token>"
// header (the API has checked it already).
func bearer(h string) string {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// errStopping answers a stream opened while the hub shuts down.
var errStopping = fmt.Errorf("the hub is shutting down: %w", store.ErrClosed)
