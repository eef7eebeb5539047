package hub

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/hub/adminconf"
	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/hub/backup"
	"github.com/fleetmq/fleet/hub/controller"
	"github.com/fleetmq/fleet/hub/enrollment"
	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/hub/history"
	"github.com/fleetmq/fleet/hub/homeassistant"
	"github.com/fleetmq/fleet/hub/ingest"
	"github.com/fleetmq/fleet/hub/metrics"
	"github.com/fleetmq/fleet/hub/pki"
	"github.com/fleetmq/fleet/hub/remote"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

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
	ln    net.Listener   // plain HTTP; nil when off
	tlsLn net.Listener   // HTTPS, before TLS; nil when off
	tls   *pki.ServerTLS // nil without any TLS listener
	info  Info

	metrics     *metrics.Metrics
	broker      *broker.Broker // nil with an external broker
	conn        *deferredConn
	model       *fleetmodel.Model
	ctrl        *controller.Controller
	ingest      *ingest.Ingest
	remote      *remote.Manager
	enroll      *enrollment.Handler
	mqttAccount broker.MosquittoAccount
	mosq        *mosquittoSync    // nil unless MosquittoConfigDir is set (mosquitto.go)
	signer      *pki.Signer       // signs every published desired state
	clientCA    *pki.ClientCA     // signs devices' client certificates; nil without
	backups     *backup.Scheduler // scheduled backups; nil without --backup-dir (backups.go)
	cas         *caRotation       // the hub's own CA and its rotation; nil without (carotation.go)
	certRenew   *certRenewer      // renews client certificates over MQTT; nil without clientCA (certrenew.go)

	history *history.History // what the dashboard's charts show (routes.go)

	ha *homeassistant.Publisher // nil unless HomeAssistantDiscovery (homeassistant.go)

	lead *leadership // who runs the controller (leader.go)
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
	// The store first: a hub that cannot have it (another hub holds the
	// Badger directory, etcd has no quorum, another fleet's prefix) stops
	// before it makes or renews any key file.
	so, err := opts.storeOptions(log.With("component", "store"))
	if err != nil {
		return nil, err
	}
	st, err := store.Open(so)
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
	keys, err := loadKeys(opts)
	if err != nil {
		return nil, err
	}
	if so.Etcd != nil {
		if err = checkFleetKeys(ctx, st, keys, opts.DataDir); err != nil {
			return nil, err
		}
	}
	info := Info{AdminConfig: adminconf.Path(opts.DataDir), StoreID: st.ID()}
	ln, tlsLn, err := listenAPI(opts, &info, &closers)
	if err != nil {
		return nil, err
	}
	var adminCA []byte
	if keys.tls.OwnCA() {
		info.CA, info.CAHash = keys.tls.CAPEM(), keys.tls.CAHash()
		// During a CA rotation the CLI trusts both CAs.
		adminCA = keys.tls.CAs().BundlePEM()
	}
	if err := adminconf.Ensure(ctx, st, info.AdminConfig, info.URL, adminCA, log); err != nil {
		return nil, err
	}
	// The parts, in the order data flows: the fleet model first (the
	// controller and the ingest write it; the API and the metrics read it).
	model := newModel(opts)
	h := &Hub{
		opts: opts, log: log, store: st, ln: ln, tlsLn: tlsLn, tls: keys.tls,
		conn:        newDeferredConn(),
		model:       model,
		mqttAccount: broker.MosquittoAccount{Identity: broker.Identity{Name: opts.BrokerUsername, Role: broker.RoleHub}, Password: keys.mqttPassword},
		metrics:     newMetrics(model, keys),
		signer:      keys.signer,
		clientCA:    keys.clientCA,
	}

	if keys.tls.OwnCA() {
		registerRenewals(keys.tls, h.metrics.Registry)
		h.cas = newCARotation(keys.tls.CAs(), model, func() { h.ctrl.RepublishAll() }, info.AdminConfig, h.metrics.Registry, log.With("component", "ca"))
	}

	if opts.Broker == "" {
		if h.broker, err = newBroker(opts, st, keys, &info, h.metrics, h.auditLoginRefused); err != nil {
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
	if err := h.newLeadership(); err != nil { // leader.go
		return nil, err
	}
	if err := h.setupMosquittoSync(); err != nil {
		return nil, err
	}

	if err := h.newParts(); err != nil {
		return nil, err
	}
	if h.backups, err = h.newBackupScheduler(); err != nil {
		return nil, err
	}
	h.logRestore(ctx)
	return h, nil
}

// checkFleetKeys checks, on a store other hubs share (etcd), that this
// hub brings the fleet's CA and signing key, not keys of its own.
func checkFleetKeys(ctx context.Context, st *store.Store, keys hubKeys, dataDir string) error {
	if keys.tls != nil && keys.tls.OwnCA() {
		if err := checkFleetCA(ctx, st, keys.tls.CAHash()); err != nil {
			return err
		}
	}
	return checkFleetSigningKey(ctx, st, keys.signer, dataDir) // fleetsigning.go
}

// hubKeys are the hub's key material (hub/pki) and its MQTT password, all
// kept in the data directory.
type hubKeys struct {
	tls       *pki.ServerTLS // nil without any TLS listener
	tlsConfig *tls.Config    // of tls; nil without
	signer    *pki.Signer
	clientCA  *pki.ClientCA // nil: no client certificates
	// clientCerts is --mqtt-client-certs.
	clientCerts  broker.ClientCertMode
	mqttPassword string
}

// loadKeys loads (on first start: makes) the TLS certificates the
// listeners need, the signing key, the CA of client certificates and the
// hub's MQTT password.
func loadKeys(opts Options) (k hubKeys, err error) {
	if opts.HTTPSAddr != Off || opts.mqttTLS() {
		sans := pki.ServerSANs([]string{opts.AdvertiseMQTTURL, opts.AdvertiseHTTPURL}, opts.TLSSANs)
		if k.tls, err = pki.NewServerTLS(pki.ServerTLSOptions{
			CertFile: opts.TLSCertFile, KeyFile: opts.TLSKeyFile, DataDir: opts.DataDir, SANs: sans,
			Lifetime: opts.TLSCertLifetime, Now: time.Now(), Logger: opts.Logger,
		}); err != nil {
			return k, err
		}
		k.tlsConfig = k.tls.Config()
	}
	if k.signer, err = pki.LoadOrCreateSigner(opts.DataDir); err != nil {
		return k, err
	}
	if k.clientCA, k.clientCerts, err = setupClientCerts(opts, k.tls, opts.Logger); err != nil {
		return k, err
	}
	k.mqttPassword = opts.BrokerPassword
	if k.mqttPassword == "" {
		if k.mqttPassword, err = EnsureMQTTPassword(opts.DataDir); err != nil {
			return k, err
		}
	}
	return k, nil
}

// setupClientCerts makes the CA that signs devices' client certificates,
// or nil. The hub has one when it has its own CA (devices then get a
// certificate at enrollment even with --mqtt-client-certs=off, ready for
// the day it is turned on), or when client certificates are asked for.
func setupClientCerts(opts Options, t *pki.ServerTLS, log *slog.Logger) (*pki.ClientCA, broker.ClientCertMode, error) {
	mode, err := broker.ParseClientCertMode(opts.MQTTClientCerts)
	if err != nil {
		return nil, mode, fmt.Errorf("--mqtt-client-certs: %w", err)
	}
	if mode != broker.ClientCertsOff && (opts.Broker != "" || !opts.mqttTLS()) {
		return nil, mode, fmt.Errorf("--mqtt-client-certs=%s: needs the embedded broker's TLS listener (--mqtts-addr), not an external --broker", mode)
	}
	if t == nil || (!t.OwnCA() && mode == broker.ClientCertsOff) {
		return nil, mode, nil
	}
	if t.OwnCA() {
		// One set of CAs for the server and the client certificates: a
		// CA rotation moves both.
		return pki.NewClientCAOf(t.CAs()), mode, nil
	}
	ca, err := pki.NewClientCA(opts.DataDir, log)
	if err != nil {
		return nil, mode, err
	}
	return ca, mode, nil
}

// listenAPI binds the API's listeners that are on, adding their closers,
// and records their URLs in info.
func listenAPI(opts Options, info *Info, closers *[]func() error) (ln, tlsLn net.Listener, err error) {
	if opts.HTTPAddr != Off {
		if ln, err = net.Listen("tcp", opts.HTTPAddr); err != nil {
			return nil, nil, fmt.Errorf("listen for http on %s: %w", opts.HTTPAddr, err)
		}
		*closers = append(*closers, ln.Close)
		info.URL = URLFor(ln.Addr().String())
	}
	if opts.HTTPSAddr != Off {
		if tlsLn, err = net.Listen("tcp", opts.HTTPSAddr); err != nil {
			return nil, nil, fmt.Errorf("listen for https on %s: %w", opts.HTTPSAddr, err)
		}
		*closers = append(*closers, tlsLn.Close)
		info.HTTPSURL = "https" + strings.TrimPrefix(URLFor(tlsLn.Addr().String()), "http")
		if opts.AdvertiseHTTPURL != "" {
			info.HTTPSURL = opts.AdvertiseHTTPURL
		}
		if info.URL == "" {
			info.URL = info.HTTPSURL
		}
	}
	return ln, tlsLn, nil
}

// newModel creates the fleet model; a StaleAfter of 0 or less is off.
func newModel(opts Options) *fleetmodel.Model {
	staleAfter := opts.StaleAfter
	if staleAfter <= 0 {
		staleAfter = -1 // off
	}
	return fleetmodel.New(fleetmodel.Options{StaleAfter: staleAfter})
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
		Model: h.model.Writer(), Metrics: h.metrics, Signer: h.signer, CABundle: h.caBundle(),
		ResyncInterval: h.opts.ResyncInterval, StatusDebounce: h.opts.StatusDebounce,
	})
	if err != nil {
		return err
	}
	h.remote, err = remote.New(remote.Options{
		Conn: h.conn, Model: h.model, Topics: h.opts.Topics, Signer: h.signer, // signs every request to a device
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
	if h.clientCA != nil {
		h.certRenew = newCertRenewer(h.clientCA, h.store, h.conn, h.opts.Topics, h.log.With("component", "certs"))
	}
	h.enroll = enrollment.New(enrollment.Options{
		Store: h.store, Conn: h.conn, Topics: h.opts.Topics, Logger: h.log.With("component", "enroll"),
		Reserved: reserved, Signer: h.signer, Audit: h.auditEnroll, Certs: h.clientCA,
	})

	h.api, err = api.New(api.Options{
		Store: h.store, Logger: h.log.With("component", "api"), BookmarkInterval: h.opts.BookmarkInterval,
		Status: statusView{h.model}, ObserveRequest: h.observeRequest,
		AuthLimiter: authLimiter(h.metrics, metrics.ListenerHTTP),
		Reserved:    reserved,
		CAHash:      h.info.CAHash,
		CAHashFunc:  h.tls.CAHashFunc(),
		BootstrapTokenDeleted: func(id string) {
			if b != nil {
				b.Kick(schema.BootstrapUsername(id))
			}
		},
	})
	if err != nil {
		return err
	}
	if err := h.newHomeAssistant(); err != nil {
		return err
	}
	return h.routes()
}

// caBundle is what the controller puts in every desired state's
// caBundle: the hub's own CAs, or nothing.
func (h *Hub) caBundle() func() string {
	if h.cas == nil {
		return nil
	}
	return h.cas.bundle
}

// newMetrics creates the hub's metrics, with the fleet gauges read from
// the model's counts and the certificates' expiry from keys.
func newMetrics(model *fleetmodel.Model, keys hubKeys) *metrics.Metrics {
	return metrics.New(metrics.Gauges{
		Devices:      func() float64 { return float64(model.DeviceCount()) },
		Online:       func() float64 { return float64(model.OnlineCount()) },
		Converged:    func() float64 { return float64(model.ConvergedCount()) },
		TopReports:   model.TopReports,
		Presences:    model.DevicePresences,
		Deployments:  model.DeploymentStatuses,
		Certificates: certificateExpiries(keys),
	})
}

// certificateExpiries reads when the hub's certificates expire, at each
// scrape (a renewed or reloaded certificate shows at once). A hub without
// TLS has none; one given --tls-cert has a server certificate and no CA.
func certificateExpiries(keys hubKeys) func() []metrics.CertificateExpiry {
	return func() []metrics.CertificateExpiry {
		var out []metrics.CertificateExpiry
		if keys.tls != nil {
			out = append(out,
				metrics.CertificateExpiry{Certificate: metrics.CertServer, NotAfter: keys.tls.ServerNotAfter()},
				metrics.CertificateExpiry{Certificate: metrics.CertCA, NotAfter: keys.tls.CANotAfter()})
		}
		if keys.clientCA != nil {
			out = append(out, metrics.CertificateExpiry{Certificate: metrics.CertClientCA, NotAfter: keys.clientCA.NotAfter()})
		}
		return out
	}
}

// newBroker creates the embedded broker, binding its listeners, and
// records its addresses in info.
func newBroker(opts Options, st *store.Store, keys hubKeys, info *Info, m *metrics.Metrics, onLoginRefused func(broker.LoginRefusal)) (*broker.Broker, error) {
	tlsConfig := keys.tlsConfig
	if !opts.mqttTLS() {
		tlsConfig = nil
	}
	bo := broker.Options{
		Addr: opts.MQTTAddr, NoPlain: opts.MQTTAddr == Off, TLSAddr: opts.MQTTTLSAddr, TLSConfig: tlsConfig,
		Auth: storeAuth{st: st}, Topics: opts.Topics, Logger: opts.Logger,
		AuthLimiter: authLimiter(m, metrics.ListenerMQTT), OnClientCutOff: m.Abuse.ClientCutOff,
		OnLoginRefused: onLoginRefused,
		// Admitted when the first pass is done (run.go startEmbedded).
		HoldConnections: deviceHold,
	}
	if keys.clientCA != nil {
		bo.ClientCerts, bo.ClientCAsFunc = keys.clientCerts, keys.clientCA.Pool
	}
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
