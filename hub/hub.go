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
	"strings"
	"sync"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/hub/controller"
	"github.com/fleetmq/fleet/hub/ingest"
	"github.com/fleetmq/fleet/hub/metrics"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// Defaults of Options.
const (
	DefaultDataDir  = "./fleet-data"
	DefaultHTTPAddr = "127.0.0.1:8080"
	DefaultMQTTAddr = broker.DefaultAddr
	// DefaultMQTTTLSAddr is used when a TLS certificate is given.
	DefaultMQTTTLSAddr = broker.DefaultTLSAddr
)

// Options configure a hub. The zero value works (MQTT on :1883).
type Options struct {
	// DataDir holds the store and admin.conf; default ./fleet-data.
	DataDir string
	// HTTPAddr is the API's listen address; default 127.0.0.1:8080. With
	// port 0 the kernel picks one; admin.conf gets the real address.
	HTTPAddr string
	// Logger; default discards. The embedded broker logs through it too.
	Logger *slog.Logger
	// BookmarkInterval of watch streams; default 15 s.
	BookmarkInterval time.Duration
	// ShutdownTimeout bounds the graceful end of HTTP requests; default 10 s.
	ShutdownTimeout time.Duration
	// Ready, if set, is called once the API accepts connections.
	Ready func(Info)
	// Version is what GET /v1/info reports; default "dev".
	Version string

	// MQTTAddr is the embedded broker's plain listener; default ":1883".
	MQTTAddr string
	// TLSCertFile and TLSKeyFile turn on the embedded broker's TLS
	// listener on MQTTTLSAddr (default ":8883").
	TLSCertFile string
	TLSKeyFile  string
	MQTTTLSAddr string
	// AdvertiseMQTTURL is the broker URL GET /v1/info gives devices;
	// default: the TLS listener if any, else the plain one (a wildcard
	// host stays 0.0.0.0), or the external broker's URL.
	AdvertiseMQTTURL string
	// Topics is the MQTT topic layout; default prefix fleet/v1.
	Topics schema.Topics

	// Broker, if set, is the URL of an external MQTT broker (tcp://,
	// ssl://…): no embedded broker runs, and the hub connects as
	// BrokerUsername (default "fleet-hub") with BrokerPassword (default:
	// <data-dir>/mqtt-password, created on first start).
	Broker         string
	BrokerUsername string
	BrokerPassword string
	// BrokerCAFile is a PEM bundle of CAs for an ssl:// broker.
	BrokerCAFile string
	// BrokerClientID is the hub's stable MQTT client ID on the external
	// broker (its persistent session); default BrokerUsername.
	BrokerClientID string

	// ResyncInterval is the controller's full recompute period; default
	// 30 s.
	ResyncInterval time.Duration
	// StaleAfter: a device not heard from for this long is stale; default
	// 90 s (three agent heartbeats).
	StaleAfter time.Duration
	// StatusFlushInterval is how often reports are written to the store
	// (in one batch); default 200 ms.
	StatusFlushInterval time.Duration
	// StatusDebounce delays the controller pass that follows a report;
	// default controller.DefaultStatusDebounce.
	StatusDebounce time.Duration
	// MemoryTrimInterval is how often the hub looks for free heap to give
	// back to the OS after a burst; default DefaultMemoryTrimInterval,
	// negative: never (the Go runtime's own pace).
	MemoryTrimInterval time.Duration
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
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.MQTTAddr == "" {
		o.MQTTAddr = DefaultMQTTAddr
	}
	if o.MQTTTLSAddr == "" {
		o.MQTTTLSAddr = DefaultMQTTTLSAddr
	}
	if o.BrokerUsername == "" {
		o.BrokerUsername = DefaultBrokerUsername
	}
	if o.MemoryTrimInterval == 0 {
		o.MemoryTrimInterval = DefaultMemoryTrimInterval
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
	// MQTTURL is what devices are told to connect to.
	MQTTURL string
	// MQTTAddr and MQTTTLSAddr are the embedded broker's bound listeners
	// ("" with an external broker, or without TLS).
	MQTTAddr    string
	MQTTTLSAddr string
}

// Hub is an assembled hub: store, admin credential, HTTP API, MQTT broker
// (or a connection to an external one), controller and status ingest.
type Hub struct {
	opts  Options
	log   *slog.Logger
	store *store.Store
	api   *api.Server
	ln    net.Listener
	info  Info

	metrics     *metrics.Metrics
	broker      *broker.Broker // nil with an external broker
	conn        *deferredConn
	ctrl        *controller.Controller
	ingest      *ingest.Ingest
	enroll      *enroller
	mqttAccount MosquittoAccount
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
// exist, binds the API's and the broker's addresses and assembles the
// parts. Call Run next (it closes everything).
func New(ctx context.Context, opts Options) (_ *Hub, err error) {
	opts.setDefaults()
	log := opts.Logger
	if opts.Broker != "" {
		if err := checkMQTTURL(opts.Broker); err != nil {
			return nil, fmt.Errorf("--broker: %w", err)
		}
	}
	if opts.Broker != "" && (opts.TLSCertFile != "" || opts.TLSKeyFile != "") {
		log.Warn("--tls-cert and --tls-key are for the embedded broker; with --broker they are ignored")
	}
	if opts.AdvertiseMQTTURL != "" {
		if err := checkMQTTURL(opts.AdvertiseMQTTURL); err != nil {
			return nil, fmt.Errorf("--advertise-mqtt-url: %w", err)
		}
	}
	if p := opts.Topics.Prefix; strings.ContainsAny(p, "+#\x00") || strings.HasPrefix(p, "/") || strings.HasPrefix(p, "$") {
		return nil, fmt.Errorf("topic prefix %q: must not contain wildcards or start with '/' or '$'", p)
	}
	tlsConfig, err := loadTLS(opts.TLSCertFile, opts.TLSKeyFile)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	mqttPassword := opts.BrokerPassword
	if mqttPassword == "" {
		if mqttPassword, err = EnsureMQTTPassword(opts.DataDir); err != nil {
			return nil, err
		}
	}
	st, err := store.Open(store.Options{
		Dir: filepath.Join(opts.DataDir, "store"), Logger: log.With("component", "store"),
		PasswordHash: broker.MosquittoPasswordHash,
	})
	if err != nil {
		return nil, err
	}
	var closers []func() error
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				err = errors.Join(err, closers[i]())
			}
			err = errors.Join(err, st.Close())
		}
	}()
	ln, err := net.Listen("tcp", opts.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("listen for http on %s: %w", opts.HTTPAddr, err)
	}
	closers = append(closers, ln.Close)
	info := Info{
		URL:         URLFor(ln.Addr().String()),
		AdminConfig: AdminConfigPath(opts.DataDir),
		StoreID:     st.ID(),
	}
	if err := ensureAdmin(ctx, st, info, log); err != nil {
		return nil, err
	}
	h := &Hub{
		opts: opts, log: log, store: st, ln: ln,
		conn:        newDeferredConn(),
		mqttAccount: MosquittoAccount{Username: opts.BrokerUsername, Password: mqttPassword},
	}
	h.metrics = metrics.New(metrics.Gauges{
		Devices:   func() float64 { d, _, _ := h.ctrl.Counts(); return float64(d) },
		Online:    func() float64 { _, o, _ := h.ctrl.Counts(); return float64(o) },
		Converged: func() float64 { _, _, c := h.ctrl.Counts(); return float64(c) },
	})

	if opts.Broker == "" {
		b, err := broker.New(broker.Options{
			Addr: opts.MQTTAddr, TLSAddr: opts.MQTTTLSAddr, TLSConfig: tlsConfig,
			Auth: storeAuth{st: st}, Topics: opts.Topics, Logger: log,
		})
		if err != nil {
			return nil, err
		}
		closers = append(closers, b.Close)
		h.broker = b
		info.MQTTAddr = b.Addr().String()
		info.MQTTURL = mqttURLFor(b.Addr(), false)
		if a := b.TLSAddr(); a != nil {
			info.MQTTTLSAddr = a.String()
			info.MQTTURL = mqttURLFor(a, true)
		}
		// A rotated token, a deleted device or a deleted credential ends
		// its sessions before the API answers.
		st.OnAuthChange(func(_ store.AuthChangeKind, name string) { b.Kick(name) })
	} else {
		info.MQTTURL = opts.Broker
	}
	if opts.AdvertiseMQTTURL != "" {
		info.MQTTURL = opts.AdvertiseMQTTURL
	}
	h.info = info

	h.ctrl, err = controller.New(controller.Options{
		Store: st, Conn: h.conn, Topics: opts.Topics, Logger: log.With("component", "controller"),
		Metrics: h.metrics, ResyncInterval: opts.ResyncInterval, StatusDebounce: opts.StatusDebounce,
		OnDeviceRemoved: func(name string) { h.ingest.Forget(name) },
	})
	if err != nil {
		return nil, err
	}
	h.ingest, err = ingest.New(ingest.Options{
		Conn: h.conn, Store: st, Registry: h.ctrl, Topics: opts.Topics,
		Logger: log.With("component", "ingest"), Metrics: h.metrics,
		OnChange: h.ctrl.DeviceStatusChanged, FlushInterval: opts.StatusFlushInterval, StaleAfter: opts.StaleAfter,
	})
	if err != nil {
		return nil, err
	}
	h.ctrl.SetStatusSource(h.ingest)
	h.enroll = &enroller{
		st: st, conn: h.conn, topics: opts.Topics, log: log.With("component", "enroll"),
		reserved: func(name string) bool { return name == opts.BrokerUsername },
	}

	h.api, err = api.New(api.Options{
		Store: st, Logger: log.With("component", "api"), BookmarkInterval: opts.BookmarkInterval,
		Status: statusView{h}, ObserveRequest: h.metrics.ObserveRequest,
		Reserved: func(name string) bool { return name == opts.BrokerUsername },
		BootstrapTokenDeleted: func(id string) {
			if h.broker != nil {
				h.broker.Kick(schema.BootstrapUsername(id))
			}
		},
	})
	if err != nil {
		return nil, err
	}
	h.routes()
	return h, nil
}

// Store is the hub's store, for the parts that run beside the API.
func (h *Hub) Store() *store.Store { return h.store }

// API is the HTTP API server; add routes with API().Handle before Run.
func (h *Hub) API() *api.Server { return h.api }

// Info describes the hub.
func (h *Hub) Info() Info { return h.info }

// Metrics are the hub's metrics.
func (h *Hub) Metrics() *metrics.Metrics { return h.metrics }

// Run serves MQTT and the API until ctx is done, then shuts everything
// down: the HTTP server (ending watch streams), the controller and the
// ingest (which writes the reports still waiting), the MQTT side, and the
// store.
func (h *Hub) Run(ctx context.Context) (err error) {
	var stopping time.Time
	defer func() {
		if cerr := h.store.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		if !stopping.IsZero() {
			h.log.Info("hub stopped", "took", time.Since(stopping).Round(time.Millisecond))
		}
	}()
	// Closed by srv.Shutdown once served; this covers an early return.
	defer h.ln.Close()
	partsCtx, stopParts := context.WithCancel(ctx)
	defer stopParts()
	var parts sync.WaitGroup
	partErr := make(chan error, 4)
	// brokerDone gets the embedded broker's Run result once it runs.
	var brokerDone chan error
	defer func() {
		stopParts()
		parts.Wait()
		if c := h.conn.get(); c != nil {
			err = errors.Join(err, c.Close())
		}
		if h.broker != nil {
			err = errors.Join(err, h.broker.Close())
			if brokerDone != nil {
				err = errors.Join(err, <-brokerDone)
			}
		}
	}()
	if h.opts.MemoryTrimInterval > 0 {
		parts.Go(func() { trimMemory(partsCtx, h.opts.MemoryTrimInterval, h.log) })
	}
	// startParts subscribes, calls listening, loads the controller and the
	// ingest, releases the messages that arrived meanwhile and runs them.
	startParts := func(conn broker.Conn, listening func()) error {
		h.conn.set(conn)
		if err := h.ingest.Subscribe(partsCtx); err != nil {
			return err
		}
		if err := h.enroll.Subscribe(partsCtx); err != nil {
			return err
		}
		listening()
		// The two loads read different keys; side by side they take the
		// longer one's time, not the sum (1.1 s at 10,000 devices).
		loadStart := time.Now()
		var ingestErr error
		var loading sync.WaitGroup
		loading.Go(func() { ingestErr = h.ingest.Load(partsCtx) })
		ctrlErr := h.ctrl.Load(partsCtx)
		loading.Wait()
		if err := errors.Join(ctrlErr, ingestErr); err != nil {
			return err
		}
		h.conn.release()
		h.log.Info("hub state loaded", "took", time.Since(loadStart).Round(time.Millisecond))
		if h.broker != nil {
			warnListenBacklog(h.log, h.ctrl.DeviceCount(), broker.ListenBacklog)
		}
		parts.Go(func() {
			if err := h.ctrl.Run(partsCtx); err != nil {
				partErr <- err
			}
		})
		parts.Go(func() {
			select {
			case <-h.ctrl.Ready():
				h.log.Info("retained desired states published", "took", time.Since(loadStart).Round(time.Millisecond))
			case <-partsCtx.Done():
			}
		})
		parts.Go(func() {
			if err := h.ingest.Run(partsCtx); err != nil {
				partErr <- err
			}
		})
		return nil
	}

	if h.broker != nil {
		// The broker keeps nothing across restarts: the controller's first
		// pass rebuilds every retained desired state from the store
		// (guarantee 4). Devices may connect from the moment the hub has
		// subscribed: their reports wait for the store to be loaded, and a
		// device that subscribes before its state is republished receives
		// it live moments later. Making a fleet that lost its hub wait for
		// the load and the rebuild would only keep it in backoff longer.
		listening := func() {
			brokerDone = make(chan error, 1)
			go func() { brokerDone <- h.broker.Run(context.WithoutCancel(ctx)) }()
		}
		if err := startParts(h.broker.InlineConn(), listening); err != nil {
			return err
		}
		// The API, and with it /healthz and Options.Ready, comes up once
		// the rebuild is done: a client that waits for the hub to be ready
		// finds every desired state retained.
		select {
		case <-h.ctrl.Ready():
		case err := <-partErr:
			return err
		case <-ctx.Done():
			return nil
		}
	} else {
		parts.Go(func() {
			conn, err := broker.DialExternal(partsCtx, broker.ExternalOptions{
				URL: h.opts.Broker, Username: h.opts.BrokerUsername, Password: h.mqttAccount.Password,
				ClientID: h.opts.BrokerClientID, CAFile: h.opts.BrokerCAFile,
				Logger: h.log.With("component", "mqtt"),
			})
			if err != nil {
				if partsCtx.Err() == nil {
					partErr <- err
				}
				return
			}
			if err := startParts(conn, func() {}); err != nil {
				if partsCtx.Err() == nil {
					partErr <- err
				}
				return
			}
			// After a reconnect the broker may have lost its retained
			// messages (a restart without persistence): publish them all.
			conn.OnConnect(h.ctrl.RepublishAll)
		})
	}

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
	h.log.Info("hub started", "api", h.info.URL, "admin_config", h.info.AdminConfig, "store_id", h.info.StoreID,
		"mqtt_url", h.info.MQTTURL, "external_broker", h.broker == nil)
	if h.opts.Ready != nil {
		h.opts.Ready(h.info)
	}
	var runErr error
	select {
	case err := <-serveErr:
		runErr = fmt.Errorf("serve http: %w", err)
	case err := <-partErr:
		runErr = err
		h.log.Error("hub part failed; shutting down", "err", err)
	case err := <-brokerDone:
		brokerDone = nil
		runErr = fmt.Errorf("mqtt broker stopped: %w", err)
	case <-ctx.Done():
	}
	h.log.Info("hub shutting down")
	stopping = time.Now()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.opts.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
		return errors.Join(runErr, fmt.Errorf("shut down http: %w", err))
	}
	if runErr == nil {
		if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve http: %w", err)
		}
	}
	return runErr
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
