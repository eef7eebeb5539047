package hub

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/hub/controller"
	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/hub/ingest"
	"github.com/fleetmq/fleet/hub/metrics"
	"github.com/fleetmq/fleet/hub/remote"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// Defaults of Options.
const (
	DefaultDataDir  = "./fleet-data"
	DefaultHTTPAddr = "127.0.0.1:8080"
	// DefaultMQTTAddr is the plain MQTT listener: loopback only, for
	// local scripts and agents; devices use MQTT over TLS.
	DefaultMQTTAddr = "127.0.0.1:1883"
	// DefaultMQTTTLSAddr is the MQTT-over-TLS listener fleet-hub opens
	// by default (and Options does when a TLS certificate is given).
	DefaultMQTTTLSAddr = broker.DefaultTLSAddr
	// DefaultHTTPSAddr is the HTTPS API listener fleet-hub opens by
	// default.
	DefaultHTTPSAddr = ":8443"
)

// Off, as a listen address of Options, turns that listener off.
const Off = "off"

// Options configure a hub. The zero value works (the API on
// 127.0.0.1:8080, MQTT on 127.0.0.1:1883, no TLS listener).
type Options struct {
	// DataDir holds the store, admin.conf and secrets.key (the key that
	// encrypts Secrets in the store: back it up with the store); default
	// ./fleet-data.
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

	// MQTTAddr is the embedded broker's plain listener; default
	// "127.0.0.1:1883"; Off: none.
	MQTTAddr string
	// HTTPSAddr is the HTTPS API listener; "" or Off: none (fleet-hub
	// passes ":8443").
	HTTPSAddr string
	// MQTTTLSAddr is the embedded broker's MQTT-over-TLS listener; ""
	// (or Off): none, unless TLSCertFile is given (then ":8883").
	MQTTTLSAddr string
	// TLSCertFile and TLSKeyFile are the certificate (chain) and key
	// the TLS listeners present, read again on SIGHUP. Without them the
	// hub makes its own CA (ca.crt, ca.key in DataDir) and a server
	// certificate (hub.crt, hub.key) for its names, renewed on start
	// within 30 days of its end.
	TLSCertFile string
	TLSKeyFile  string
	// TLSSANs are extra names (DNS names or IP addresses) of the hub's
	// own server certificate.
	TLSSANs []string
	// MQTTClientCerts is what the embedded broker's TLS listener asks
	// of client certificates signed by the hub's CA: "off" (default),
	// "optional" or "required" (broker.ClientCertMode; clientcert.go).
	MQTTClientCerts string
	// InsecurePlaintext allows plain HTTP and MQTT listeners on
	// non-loopback addresses; without it New refuses them.
	InsecurePlaintext bool
	// AdvertiseHTTPURL is the API URL clients on other machines use
	// (https://hub.example:8443): a name of the server certificate, and
	// admin.conf's hub when there is no plain listener.
	AdvertiseHTTPURL string
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
	// MosquittoConfigDir, with an external Mosquitto (Broker), is the
	// directory of its password and ACL files (passwd, acl; see
	// `fleet-hub mosquitto-config --out`): the hub writes them on start
	// and rewrites them (atomically) after every change of accounts.
	// Default: none (run mosquitto-config and reload by hand).
	MosquittoConfigDir string
	// MosquittoPIDFile is Mosquitto's pid_file: after rewriting the files
	// the hub sends that process SIGHUP, so it reloads them (and drops
	// the clients whose token is gone). Default: none (no signal).
	MosquittoPIDFile string

	// ResyncInterval is the controller's full recompute period; default
	// 30 s.
	ResyncInterval time.Duration
	// StaleAfter: a device not heard from for this long is stale; 0 (the
	// default): never, a device is online while its MQTT session is up
	// (agents do not republish an unchanged status; the broker's keepalive
	// and the device's last will keep the online topic true).
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
	if o.MQTTTLSAddr == "" && o.TLSCertFile != "" {
		o.MQTTTLSAddr = DefaultMQTTTLSAddr
	}
	if o.HTTPSAddr == "" {
		o.HTTPSAddr = Off
	}
	if o.MQTTTLSAddr == "" {
		o.MQTTTLSAddr = Off
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
	// URL of the HTTP API, as written into admin.conf: the plain
	// listener's, else the HTTPS one.
	URL string
	// HTTPSURL is the HTTPS API's URL (AdvertiseHTTPURL if set); "" without
	// HTTPS.
	HTTPSURL string
	// CA is the PEM of the hub's own CA, CAHash its pin
	// (schema.CAHash); nil and "" with a given certificate or no TLS.
	CA     []byte
	CAHash string
	// MQTTPlainURL is the plain MQTT listener's URL ("" when off).
	MQTTPlainURL string
	// AdminConfig is the path of admin.conf.
	AdminConfig string
	// StoreID identifies the store (DesiredState.Store).
	StoreID string
	// MQTTURL is what devices are told to connect to.
	MQTTURL string
	// MQTTAddr and MQTTTLSAddr are the embedded broker's bound listeners
	// ("" with an external broker, or when off).
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
	ln    net.Listener // plain HTTP; nil when off
	tlsLn net.Listener // HTTPS, before TLS; nil when off
	tls   *hubTLS      // nil without any TLS listener
	info  Info

	metrics     *metrics.Metrics
	broker      *broker.Broker // nil with an external broker
	conn        *deferredConn
	model       *fleetmodel.Model
	ctrl        *controller.Controller
	ingest      *ingest.Ingest
	remote      *remote.Manager
	enroll      *enroller
	mqttAccount broker.MosquittoAccount
	mosq        *mosquittoSync // nil unless MosquittoConfigDir is set (mosquitto_sync.go)
	signer      *Signer        // signs every published desired state (signing.go)
	clientCA    *clientCA      // signs devices' client certificates; nil without (clientcert.go)
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
	if err := opts.check(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	var hubTLS *hubTLS
	var tlsConfig *tls.Config
	if opts.HTTPSAddr != Off || opts.mqttTLS() {
		sans := serverSANs([]string{opts.AdvertiseMQTTURL, opts.AdvertiseHTTPURL}, opts.TLSSANs)
		if hubTLS, err = setupTLS(opts.TLSCertFile, opts.TLSKeyFile, opts.DataDir, sans, time.Now(), log); err != nil {
			return nil, err
		}
		tlsConfig = hubTLS.config()
	}
	signer, err := LoadOrCreateSigner(opts.DataDir)
	if err != nil {
		return nil, err
	}
	clientCA, err := setupClientCerts(opts, hubTLS, log)
	if err != nil {
		return nil, err
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
	info := Info{AdminConfig: AdminConfigPath(opts.DataDir), StoreID: st.ID()}
	var ln, tlsLn net.Listener
	if opts.HTTPAddr != Off {
		if ln, err = net.Listen("tcp", opts.HTTPAddr); err != nil {
			return nil, fmt.Errorf("listen for http on %s: %w", opts.HTTPAddr, err)
		}
		closers = append(closers, ln.Close)
		info.URL = URLFor(ln.Addr().String())
	}
	if opts.HTTPSAddr != Off {
		if tlsLn, err = net.Listen("tcp", opts.HTTPSAddr); err != nil {
			return nil, fmt.Errorf("listen for https on %s: %w", opts.HTTPSAddr, err)
		}
		closers = append(closers, tlsLn.Close)
		info.HTTPSURL = "https" + strings.TrimPrefix(URLFor(tlsLn.Addr().String()), "http")
		if opts.AdvertiseHTTPURL != "" {
			info.HTTPSURL = opts.AdvertiseHTTPURL
		}
		if info.URL == "" {
			info.URL = info.HTTPSURL
		}
	}
	if hubTLS != nil && hubTLS.ca != nil {
		info.CA, info.CAHash = hubTLS.caPEM, hubTLS.caHash()
	}
	if err := ensureAdmin(ctx, st, info, log); err != nil {
		return nil, err
	}
	// The parts, in the order data flows: the fleet model first (the
	// controller and the ingest write it; the API and the metrics read it).
	staleAfter := opts.StaleAfter
	if staleAfter <= 0 {
		staleAfter = -1 // off
	}
	model := fleetmodel.New(fleetmodel.Options{StaleAfter: staleAfter})
	h := &Hub{
		opts: opts, log: log, store: st, ln: ln, tlsLn: tlsLn, tls: hubTLS,
		conn:        newDeferredConn(),
		model:       model,
		mqttAccount: broker.MosquittoAccount{Identity: broker.Identity{Name: opts.BrokerUsername, Role: broker.RoleHub}, Password: mqttPassword},
		metrics:     newMetrics(model),
		signer:      signer,
		clientCA:    clientCA,
	}

	if opts.Broker == "" {
		if h.broker, err = newBroker(opts, st, tlsConfig, clientCA, &info, h.metrics, h.auditLoginRefused); err != nil {
			return nil, err
		}
		closers = append(closers, h.broker.Close)
	} else {
		info.MQTTURL = opts.Broker
	}
	if opts.AdvertiseMQTTURL != "" {
		info.MQTTURL = opts.AdvertiseMQTTURL
	}
	h.info = info
	if err := h.setupMosquittoSync(); err != nil {
		return nil, err
	}

	if err := h.newParts(); err != nil {
		return nil, err
	}
	return h, nil
}

// newParts creates the controller (the fleet model's writer), the status
// ingest (which wakes the controller when a report changes), the
// enrollment handler and the API, in that order.
func (h *Hub) newParts() (err error) {
	b := h.broker // nil with an external broker
	hubUser := h.opts.BrokerUsername
	reserved := func(name string) bool { return name == hubUser }
	h.ctrl, err = controller.New(controller.Options{
		Store: h.store, Conn: h.conn, Topics: h.opts.Topics, Logger: h.log.With("component", "controller"),
		Model: h.model.Writer(), Metrics: h.metrics, Signer: h.signer,
		ResyncInterval: h.opts.ResyncInterval, StatusDebounce: h.opts.StatusDebounce,
	})
	if err != nil {
		return err
	}
	h.remote, err = remote.New(remote.Options{
		Conn: h.conn, Model: h.model, Topics: h.opts.Topics,
		Logger: h.log.With("component", "remote"), Metrics: h.metrics,
	})
	if err != nil {
		return err
	}
	h.ingest, err = ingest.New(ingest.Options{
		Conn: h.conn, Store: h.store, Model: h.model, Topics: h.opts.Topics,
		Logger: h.log.With("component", "ingest"), Metrics: h.metrics,
		OnChange: h.ctrl.DeviceStatusChanged, FlushInterval: h.opts.StatusFlushInterval,
		OnOnline: h.remote.DeviceOnline,
	})
	if err != nil {
		return err
	}
	h.enroll = &enroller{
		st: h.store, conn: h.conn, topics: h.opts.Topics, log: h.log.With("component", "enroll"),
		reserved: reserved, signer: h.signer, audit: h.auditEnroll, certs: h.clientCA,
	}

	h.api, err = api.New(api.Options{
		Store: h.store, Logger: h.log.With("component", "api"), BookmarkInterval: h.opts.BookmarkInterval,
		Status: statusView{h.model}, ObserveRequest: h.observeRequest,
		AuthLimiter: authLimiter(h.metrics, metrics.ListenerHTTP),
		Reserved:    reserved,
		CAHash:      h.info.CAHash,
		BootstrapTokenDeleted: func(id string) {
			if b != nil {
				b.Kick(schema.BootstrapUsername(id))
			}
		},
	})
	if err != nil {
		return err
	}
	return h.routes()
}

// newMetrics creates the hub's metrics, with the fleet gauges read from
// the model's counts.
func newMetrics(model *fleetmodel.Model) *metrics.Metrics {
	return metrics.New(metrics.Gauges{
		Devices:    func() float64 { return float64(model.DeviceCount()) },
		Online:     func() float64 { return float64(model.OnlineCount()) },
		Converged:  func() float64 { return float64(model.ConvergedCount()) },
		TopReports: model.TopReports,
	})
}

// newBroker creates the embedded broker, binding its listeners, and
// records its addresses in info.
func newBroker(opts Options, st *store.Store, tlsConfig *tls.Config, certs *clientCA, info *Info, m *metrics.Metrics, onLoginRefused func(broker.LoginRefusal)) (*broker.Broker, error) {
	if !opts.mqttTLS() {
		tlsConfig = nil
	}
	bo := broker.Options{
		Addr: opts.MQTTAddr, NoPlain: opts.MQTTAddr == Off, TLSAddr: opts.MQTTTLSAddr, TLSConfig: tlsConfig,
		Auth: storeAuth{st: st}, Topics: opts.Topics, Logger: opts.Logger,
		AuthLimiter: authLimiter(m, metrics.ListenerMQTT), OnClientCutOff: m.Abuse.ClientCutOff,
		OnLoginRefused: onLoginRefused,
	}
	certs.brokerOptions(&bo)
	b, err := broker.New(bo)
	if err != nil {
		return nil, err
	}
	if a := b.Addr(); a != nil {
		info.MQTTAddr = a.String()
		info.MQTTURL = mqttURLFor(a, false)
		info.MQTTPlainURL = info.MQTTURL
	}
	if a := b.TLSAddr(); a != nil {
		info.MQTTTLSAddr = a.String()
		info.MQTTURL = mqttURLFor(a, true)
	}
	// A rotated token, a deleted device or a deleted credential ends
	// its sessions before the API answers.
	st.OnAuthChange(func(_ store.AuthChangeKind, name string) { b.Kick(name) })
	return b, nil
}

// check refuses options that cannot work, and warns of those ignored.
func (o *Options) check() error {
	if o.Broker != "" {
		if err := checkMQTTURL(o.Broker); err != nil {
			return fmt.Errorf("--broker: %w", err)
		}
	}
	if o.HTTPAddr == Off && o.HTTPSAddr == Off {
		return errors.New("no API listener: give --http-addr or --https-addr")
	}
	if o.Broker == "" && o.MQTTAddr == Off && !o.mqttTLS() {
		return errors.New("no MQTT listener: give --mqtts-addr or --mqtt-addr (or an external --broker)")
	}
	if !o.InsecurePlaintext {
		if o.HTTPAddr != Off && !isLoopbackAddr(o.HTTPAddr) {
			return fmt.Errorf("--http-addr %s: plain HTTP off loopback would send tokens in clear: serve the API over HTTPS (--https-addr, default %s) and keep --http-addr on 127.0.0.1 (or empty to turn it off), or pass --insecure-plaintext",
				o.HTTPAddr, DefaultHTTPSAddr)
		}
		if o.Broker == "" && o.MQTTAddr != Off && !isLoopbackAddr(o.MQTTAddr) {
			return fmt.Errorf("--mqtt-addr %s: plain MQTT off loopback would send device tokens in clear: devices use MQTT over TLS (--mqtts-addr, default %s, ssl://HOST:8883); keep --mqtt-addr on 127.0.0.1 (or empty to turn it off), or pass --insecure-plaintext",
				o.MQTTAddr, DefaultMQTTTLSAddr)
		}
	}
	if o.AdvertiseHTTPURL != "" {
		if u, err := url.Parse(o.AdvertiseHTTPURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("--advertise-http-url %q: want https://HOST:PORT", o.AdvertiseHTTPURL)
		}
	}
	if o.AdvertiseMQTTURL != "" {
		if err := checkMQTTURL(o.AdvertiseMQTTURL); err != nil {
			return fmt.Errorf("--advertise-mqtt-url: %w", err)
		}
	}
	if p := o.Topics.Prefix; strings.ContainsAny(p, "+#\x00") || strings.HasPrefix(p, "/") || strings.HasPrefix(p, "$") {
		return fmt.Errorf("topic prefix %q: must not contain wildcards or start with '/' or '$'", p)
	}
	return nil
}

// mqttTLS reports whether the embedded broker has a TLS listener.
func (o *Options) mqttTLS() bool {
	return o.Broker == "" && o.MQTTTLSAddr != "" && o.MQTTTLSAddr != Off
}

// Store is the hub's store, for the parts that run beside the API.
func (h *Hub) Store() *store.Store { return h.store }

// API is the HTTP API server; add routes with API().Handle before Run.
func (h *Hub) API() *api.Server { return h.api }

// Info describes the hub.
func (h *Hub) Info() Info { return h.info }

// Metrics are the hub's metrics.
func (h *Hub) Metrics() *metrics.Metrics { return h.metrics }

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
		if err := WriteAdminConfig(path, AdminConfig{Hub: info.URL, Token: token, CA: string(info.CA)}); err != nil {
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
	conf.Hub, conf.CA = info.URL, string(info.CA)
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
