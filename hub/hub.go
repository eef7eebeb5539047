package hub

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/hub/store"
)

// Defaults of Options.
const (
	DefaultDataDir  = "./fleet-data"
	DefaultHTTPAddr = "127.0.0.1:8080"
)

// Options configure a hub. The zero value works.
type Options struct {
	// DataDir holds the store and admin.conf; default ./fleet-data.
	DataDir string
	// HTTPAddr is the API's listen address; default 127.0.0.1:8080. With
	// port 0 the kernel picks one; admin.conf gets the real address.
	HTTPAddr string
	// Logger; default discards.
	Logger *slog.Logger
	// BookmarkInterval of watch streams; default 15 s.
	BookmarkInterval time.Duration
	// ShutdownTimeout bounds the graceful end of HTTP requests; default 10 s.
	ShutdownTimeout time.Duration
	// Ready, if set, is called once the API accepts connections.
	Ready func(Info)
}

func (o *Options) setDefaults() {
	if o.DataDir == "" {
		o.DataDir = DefaultDataDir
	}
	if o.HTTPAddr == "" {
		o.HTTPAddr = DefaultHTTPAddr
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 10 * time.Second
	}
}

// Info describes a running hub.
type Info struct {
	// URL of the HTTP API, as written into admin.conf.
	URL string
	// AdminConfig is the path of admin.conf.
	AdminConfig string
	// StoreID identifies the store (DesiredState.Store).
	StoreID string
}

// Hub is an assembled hub: store, admin credential, HTTP API.
type Hub struct {
	opts  Options
	log   *slog.Logger
	store *store.Store
	api   *api.Server
	ln    net.Listener
	info  Info
}

// Run runs a hub until ctx is done, then shuts it down cleanly.
func Run(ctx context.Context, opts Options) error {
	h, err := New(ctx, opts)
	if err != nil {
		return err
	}
	return h.Run(ctx)
}

// New opens the store, makes sure the admin credential and admin.conf
// exist, and binds the API's address. Call Run next (it closes everything).
func New(ctx context.Context, opts Options) (_ *Hub, err error) {
	opts.setDefaults()
	log := opts.Logger
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	st, err := store.Open(store.Options{Dir: filepath.Join(opts.DataDir, "store"), Logger: log.With("component", "store")})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, st.Close())
		}
	}()
	ln, err := net.Listen("tcp", opts.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("listen for http on %s: %w", opts.HTTPAddr, err)
	}
	defer func() {
		if err != nil {
			ln.Close()
		}
	}()
	info := Info{
		URL:         URLFor(ln.Addr().String()),
		AdminConfig: AdminConfigPath(opts.DataDir),
		StoreID:     st.ID(),
	}
	if err := ensureAdmin(ctx, st, info, log); err != nil {
		return nil, err
	}
	srv, err := api.New(api.Options{
		Store: st, Logger: log.With("component", "api"), BookmarkInterval: opts.BookmarkInterval,
	})
	if err != nil {
		return nil, err
	}
	return &Hub{opts: opts, log: log, store: st, api: srv, ln: ln, info: info}, nil
}

// Store is the hub's store, for the parts that run beside the API.
func (h *Hub) Store() *store.Store { return h.store }

// API is the HTTP API server; add routes with API().Handle before Run.
func (h *Hub) API() *api.Server { return h.api }

// Info describes the hub.
func (h *Hub) Info() Info { return h.info }

// Run serves the API until ctx is done, then shuts the HTTP server down
// (ending watch streams) and closes the store.
func (h *Hub) Run(ctx context.Context) (err error) {
	defer func() {
		if cerr := h.store.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	srv := &http.Server{
		Handler:           h.api,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       2 * time.Minute,
		WriteTimeout:      2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(h.log.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(h.api.StopStreams)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(h.ln) }()
	h.log.Info("hub started", "api", h.info.URL, "admin_config", h.info.AdminConfig, "store_id", h.info.StoreID)
	if h.opts.Ready != nil {
		h.opts.Ready(h.info)
	}
	select {
	case err := <-serveErr:
		return fmt.Errorf("serve http: %w", err)
	case <-ctx.Done():
	}
	h.log.Info("hub shutting down")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.opts.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
		return fmt.Errorf("shut down http: %w", err)
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve http: %w", err)
	}
	return nil
}

// URLFor turns a listen address into the URL clients use: an empty or
// unspecified host (":8080", "0.0.0.0:8080", "[::]:8080") becomes
// 127.0.0.1.
func URLFor(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// ensureAdmin creates the admin credential and admin.conf on first start,
// and on every later start rewrites admin.conf's hub URL, keeping its token.
func ensureAdmin(ctx context.Context, st *store.Store, info Info, log *slog.Logger) error {
	path := info.AdminConfig
	conf, err := ReadAdminConfig(path)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Warn("admin config unreadable; leaving it alone", "path", path, "err", err)
	}
	if !st.HasCredential(store.AdminCredential) {
		token, err := store.NewToken()
		if err != nil {
			return err
		}
		// The file first: a crash before the hash is stored only means a
		// new token next start.
		if err := WriteAdminConfig(path, AdminConfig{Hub: info.URL, Token: token}); err != nil {
			return err
		}
		if err := st.PutCredential(ctx, store.AdminCredential, store.RoleAdmin, token); err != nil {
			return fmt.Errorf("store admin credential: %w", err)
		}
		log.Info("created admin token", "admin_config", path)
		return nil
	}
	if !exists {
		if errors.Is(err, fs.ErrNotExist) {
			log.Warn("admin config is missing; issue a new admin token with `fleet-hub admin-token --rotate` while the hub is stopped", "path", path)
		}
		return nil
	}
	if c, ok := st.Authenticate(conf.Token); !ok || c.Role != store.RoleAdmin {
		log.Warn("the token in the admin config is not the hub's admin token; issue a new one with `fleet-hub admin-token --rotate` while the hub is stopped", "path", path)
	}
	conf.Hub = info.URL
	return WriteAdminConfig(path, conf)
}

// RotateAdminToken issues a new admin token into the store of a stopped
// hub and writes it to admin.conf (keeping its hub URL, else using
// opts.HTTPAddr). The old token stops working. It returns the path of
// admin.conf.
func RotateAdminToken(ctx context.Context, opts Options) (string, error) {
	opts.setDefaults()
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return "", fmt.Errorf("create data dir: %w", err)
	}
	st, err := store.Open(store.Options{Dir: filepath.Join(opts.DataDir, "store"), Logger: opts.Logger, GCInterval: -1})
	if err != nil {
		return "", fmt.Errorf("rotate admin token (stop the hub first): %w", err)
	}
	path := AdminConfigPath(opts.DataDir)
	url := URLFor(opts.HTTPAddr)
	if old, err := ReadAdminConfig(path); err == nil && old.Hub != "" {
		url = old.Hub
	}
	token, err := store.NewToken()
	if err == nil {
		err = WriteAdminConfig(path, AdminConfig{Hub: url, Token: token})
	}
	if err == nil {
		err = st.PutCredential(ctx, store.AdminCredential, store.RoleAdmin, token)
	}
	if cerr := st.Close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if err != nil {
		return "", fmt.Errorf("rotate admin token: %w", err)
	}
	return path, nil
}
