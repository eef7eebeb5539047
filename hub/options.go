package hub

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/hub/backup"
	"github.com/fleetmq/fleet/hub/history"
	"github.com/fleetmq/fleet/hub/memtrim"
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
	// DefaultMemoryTrimInterval is how often the hub checks for heap to
	// give back to the OS (hub/memtrim).
	DefaultMemoryTrimInterval = memtrim.DefaultInterval
	// DefaultHistoryInterval is the width of one sample of the
	// dashboard's charts (hub/history).
	DefaultHistoryInterval = history.DefaultInterval
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
	// TLSCertLifetime is how long the hub's own server certificate is
	// valid; default one year. The hub renews it while it runs once a
	// third of it is left (at most 30 days before its end): new
	// connections get the new one, connected devices stay connected.
	TLSCertLifetime time.Duration
	// MQTTClientCerts is what the embedded broker's TLS listener asks
	// of client certificates signed by the hub's CA: "off" (default),
	// "optional" or "required" (broker.ClientCertMode; hub/pki.ClientCA).
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
	// AuditRetention and AuditMaxBytes bound the audit trail by age and
	// size (store.Options); zero: store.DefaultAuditRetention (90 days)
	// and DefaultAuditMaxBytes (100 MiB), negative: no bound.
	AuditRetention time.Duration
	AuditMaxBytes  int64
	// MemoryTrimInterval is how often the hub looks for free heap to give
	// back to the OS after a burst; default DefaultMemoryTrimInterval,
	// negative: never (the Go runtime's own pace).
	MemoryTrimInterval time.Duration

	// BackupDir, if set, turns on scheduled backups (hub/backup): one
	// every BackupEvery (default DefaultBackupEvery) into this directory,
	// written atomically, the newest BackupKeep (default 48) kept, each
	// encrypted with BackupKey (required). Default: none.
	BackupDir   string
	BackupEvery time.Duration
	BackupKeep  int
	BackupKey   backup.Key
	// BackupClock is the scheduler's clock; default the real one (tests).
	BackupClock backup.Clock
	// HistoryInterval is the width of one sample of the dashboard's
	// charts (hub/history): they span 288 of them; default
	// history.DefaultInterval (5 min: 24 h).
	HistoryInterval time.Duration
	// HomeAssistantDiscovery publishes Home Assistant MQTT discovery
	// configs (retained, under homeassistant/) for every device
	// (hub/homeassistant); default off.
	HomeAssistantDiscovery bool
	// Store is where the hub's state lives: "" or "badger" (Badger in
	// DataDir/store), or "etcd://h1:2379,h2:2379,h3:2379" (an etcd
	// cluster; see README "Running several hubs"). With etcd, the Secrets
	// key, CA and signing key stay files in DataDir, the same on every hub.
	Store string
	// EtcdPrefix is the prefix of the fleet's keys in etcd; default
	// store.DefaultEtcdPrefix ("/fleet/").
	EtcdPrefix string
	// EtcdCACertFile, EtcdCertFile and EtcdKeyFile are PEM files: the CA
	// of the etcd members' certificates, and the hub's client certificate
	// and key. Any of them turns TLS on.
	EtcdCACertFile string
	EtcdCertFile   string
	EtcdKeyFile    string
	// HubID names this hub among the hubs of a fleet on etcd (fleet get
	// hubs); default: the host name and a random suffix, kept in
	// DataDir/hub-id. A DNS-label-like name.
	HubID string
	// LeaderLease is the TTL of this hub's etcd lease, which its
	// registration and its leadership hang on (hub/leader): a dead leader
	// is replaced within it. Whole seconds, at least 2 s; default 10 s.
	// Without etcd the one hub always leads.
	LeaderLease time.Duration
}

// storeOptions are the options of the hub's store: Badger in
// DataDir/store, or etcd (Store).
func (o *Options) storeOptions(log *slog.Logger) (store.Options, error) {
	so := store.Options{
		Dir: filepath.Join(o.DataDir, "store"), Logger: log,
		PasswordHash:   broker.MosquittoPasswordHash,
		AuditRetention: o.AuditRetention, AuditMaxBytes: o.AuditMaxBytes,
	}
	useTLS := o.EtcdCACertFile != "" || o.EtcdCertFile != "" || o.EtcdKeyFile != ""
	eps, err := store.ParseStoreURL(o.Store, useTLS)
	if err != nil {
		return so, err
	}
	if eps == nil {
		if o.EtcdPrefix != "" || useTLS {
			return so, errors.New("--etcd-prefix, --etcd-cacert, --etcd-cert and --etcd-key need --store etcd://…")
		}
		return so, nil
	}
	cfg, err := store.LoadEtcdTLS(o.EtcdCACertFile, o.EtcdCertFile, o.EtcdKeyFile)
	if err != nil {
		return so, err
	}
	if o.EtcdPrefix != "" && (!strings.HasPrefix(o.EtcdPrefix, "/") || !strings.HasSuffix(o.EtcdPrefix, "/")) {
		return so, fmt.Errorf("--etcd-prefix %q: want a path that starts and ends with \"/\", such as /fleet/prod/", o.EtcdPrefix)
	}
	so.Etcd = &store.EtcdOptions{Endpoints: eps, Prefix: o.EtcdPrefix, TLS: cfg}
	return so, nil
}

// DefaultBackupEvery is the interval of scheduled backups.
const DefaultBackupEvery = time.Hour

func (o *Options) setDefaults() {
	if o.DataDir == "" {
		o.DataDir = DefaultDataDir
	}
	if o.BackupDir != "" && o.BackupEvery == 0 {
		o.BackupEvery = DefaultBackupEvery
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
	if o.HistoryInterval == 0 {
		o.HistoryInterval = history.DefaultInterval
	}
}

// check refuses options that cannot work, and warns of those ignored.
func (o *Options) check() error {
	if _, err := o.storeOptions(nil); err != nil {
		return err
	}
	if err := o.checkLeader(); err != nil { // leader.go
		return err
	}
	if o.Broker != "" {
		if err := checkMQTTURL(o.Broker); err != nil {
			return fmt.Errorf("--broker: %w", err)
		}
	}
	if o.HistoryInterval < time.Second {
		return fmt.Errorf("--history-interval %v: want a duration of at least 1s (default %v)", o.HistoryInterval, history.DefaultInterval)
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

// isLoopbackAddr reports whether a listen address binds only loopback:
// localhost or a loopback IP. An empty or unspecified host (":1883",
// "0.0.0.0:1883") binds every interface.
func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	host, _, _ = strings.Cut(host, "%")
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
