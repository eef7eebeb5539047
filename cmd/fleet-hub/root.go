package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/hub"
	"github.com/fleetmq/fleet/hub/backup"
	"github.com/fleetmq/fleet/hub/controller"
	"github.com/fleetmq/fleet/hub/leader"
	"github.com/fleetmq/fleet/hub/pki"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// settings are the values of the flags shared by every command. Each flag
// may also come from FLEET_HUB_<NAME> or the --config file (see config.go).
type settings struct {
	DataDir  string
	HTTPAddr string
	// HTTPSAddr, TLSSANs, AdvertiseHTTPURL and InsecurePlaintext: see
	// hub.Options.
	HTTPSAddr         string
	TLSSANs           []string
	AdvertiseHTTPURL  string
	InsecurePlaintext bool
	LogLevel          string
	Config            string
	MQTT              mqttSettings
	// AuditRetention and AuditMaxBytes bound the audit trail (hub.Options).
	AuditRetention time.Duration
	AuditMaxBytes  string
	// Backup are the scheduled backups' flags (hub.Options.Backup*).
	Backup backupSettings
	// HistoryInterval is the width of one sample of the dashboard's
	// charts (hub.Options).
	HistoryInterval time.Duration
	// HomeAssistantDiscovery is --homeassistant-discovery (hub.Options).
	HomeAssistantDiscovery bool
	// Store, EtcdPrefix, EtcdCACert, EtcdCert, EtcdKey: where the state
	// lives (hub.Options.Store…).
	Store      string
	EtcdPrefix string
	EtcdCACert string
	EtcdCert   string
	EtcdKey    string
	// TLSCertLifetime: hub.Options.
	TLSCertLifetime time.Duration
	// HubID and LeaderLease: this hub among several on etcd
	// (hub.Options).
	HubID       string
	LeaderLease time.Duration
}

// backupSettings are --backup-dir, --backup-every, --backup-keep and the
// key to encrypt with.
type backupSettings struct {
	Dir   string
	Every time.Duration
	Keep  int
	Key   backup.KeyFlags
}

// mqttSettings are the MQTT flags. The broker-* flags and topic-prefix are
// shared with mosquitto-config; the others only serve.
type mqttSettings struct {
	Addr    string
	TLSAddr string
	TLSCert string
	TLSKey  string
	// ClientCerts is --mqtt-client-certs (hub.Options.MQTTClientCerts).
	ClientCerts  string
	AdvertiseURL string
	TopicPrefix  string

	Broker             string
	BrokerUsername     string
	BrokerPassword     string
	BrokerPasswordFile string
	BrokerCA           string
	BrokerClientID     string
	// MosquittoConfigDir and MosquittoPIDFile: the hub keeps an external
	// Mosquitto's passwd and acl files up to date and reloads it.
	MosquittoConfigDir string
	MosquittoPIDFile   string

	ResyncInterval time.Duration
	StaleAfter     time.Duration
}

// defaultMQTTSettings are the MQTT flags' defaults.
var defaultMQTTSettings = mqttSettings{
	Addr:           hub.DefaultMQTTAddr,
	TLSAddr:        hub.DefaultMQTTTLSAddr,
	ClientCerts:    string(broker.ClientCertsOff),
	TopicPrefix:    schema.DefaultTopicPrefix,
	BrokerUsername: hub.DefaultBrokerUsername,
	ResyncInterval: controller.DefaultResyncInterval,
}

// brokerPassword is the hub's password on an external broker: the flag,
// else the file, else "" (the hub then uses <data-dir>/mqtt-password).
func (m mqttSettings) brokerPassword() (string, error) {
	if m.BrokerPassword != "" && m.BrokerPasswordFile != "" {
		return "", errors.New("give --broker-password or --broker-password-file, not both")
	}
	if m.BrokerPasswordFile == "" {
		return m.BrokerPassword, nil
	}
	b, err := os.ReadFile(m.BrokerPasswordFile)
	if err != nil {
		return "", fmt.Errorf("--broker-password-file: %w", err)
	}
	pw := strings.TrimSpace(string(b))
	if pw == "" {
		return "", fmt.Errorf("--broker-password-file %s is empty", m.BrokerPasswordFile)
	}
	return pw, nil
}

// serveFunc runs the hub with the resolved settings; tests replace it.
type serveFunc func(cmd *cobra.Command, s settings) error

// rootLong and rootExample are fleet-hub's help.
const (
	rootLong = `fleet-hub runs the Fleet control plane. It keeps Deployments and Devices in
an embedded store (Badger, in --data-dir), serves the HTTP API the fleet CLI
talks to, and publishes every device's desired state.

On first start it creates an admin token and writes it, with the API's
address, to <data-dir>/admin.conf (mode 0600); the fleet CLI reads that file
by default when run from the same directory. The token is stored only as a
hash: admin.conf is the only copy. If it is lost, stop the hub and run
"fleet-hub admin-token --rotate".

TLS: on first start the hub makes its own CA (<data-dir>/ca.crt, ca.key) and
a server certificate for its names (hub.crt, hub.key: localhost, its host
name and addresses, the hosts of --advertise-*-url and every --tls-san),
renewed on start within 30 days of its end; or it presents --tls-cert and
--tls-key, read again on SIGHUP. The API is served over HTTPS on
--https-addr (:8443) and MQTT over TLS on --mqtts-addr (:8883). admin.conf
carries the CA, which the fleet CLI pins; bootstrap tokens carry its hash.
Plain HTTP (--http-addr, 127.0.0.1:8080) and plain MQTT (--mqtt-addr,
127.0.0.1:1883) listen on loopback only: a non-loopback plain listener
needs --insecure-plaintext. An empty address turns a listener off.
With --mqtt-client-certs=optional or required the MQTT TLS listener checks
client certificates signed by the hub's CA (devices get one when they
enroll; POST /v1/devices/NAME/certificate signs one for a token device):
its name must be the device's, and with required a device over TLS must
present one. The token is still checked: a certificate is a second factor.

MQTT: the hub runs an embedded MQTT broker. Devices log in with their name and token (fleet device add), monitors with
a monitor credential (fleet monitor add). Set --advertise-mqtt-url to the URL
devices reach the broker at; the fleet CLI shows it.

With --broker tcp://HOST:PORT the hub uses an external broker (Mosquitto 2)
instead: it logs in as --broker-username (fleet-hub) with
--broker-password[-file] (default: <data-dir>/mqtt-password, created on
first start). "fleet-hub mosquitto-config" writes Mosquitto's password file,
ACL and a mosquitto.conf for the fleet's accounts. With
--mosquitto-config-dir DIR (the directory of those files) and
--mosquitto-pid-file FILE (Mosquitto's pid_file) the hub keeps passwd and
acl up to date itself: it rewrites them atomically after every device,
token or credential change and sends Mosquitto SIGHUP.

Audit trail: every write, refusal and login failure is recorded (fleet
audit); refusals are aggregated per actor, source and action a minute, so
no one can flush the trail. Entries are kept for --audit-retention (2160h)
within --audit-max-bytes (100Mi), and form a hash chain that "fleet audit
verify" checks.

Backups: with --backup-dir DIR the hub writes an encrypted backup (the store
at one revision, the CA, signing and Secrets keys) every --backup-every (1h)
and keeps the newest --backup-keep (48), encrypted with
--backup-passphrase-file (or $FLEET_BACKUP_PASSPHRASE) or to
--backup-recipient age keys. fleet_hub_backup_last_success_timestamp_seconds
and fleet_hub_backup_failures_total are on /metrics; a failure is also in
the audit trail. "fleet-hub backup --to FILE" takes one now, "fleet-hub
restore --from FILE --data-dir DIR" creates a data directory from one.

Home Assistant: with --homeassistant-discovery the hub publishes MQTT
discovery configs (retained, under homeassistant/) for every device: online,
pods running and desired, converged, restarts, memory, disk, and temperature
and throttling where the device reports them. They read the devices' own
status and online topics; a monitor credential is enough for Home Assistant.
A deleted device's entities are removed.
Store: by default the state is in Badger in <data-dir>/store (--store
badger). With --store etcd://h1:2379,h2:2379,h3:2379 it lives in an etcd
cluster instead, under --etcd-prefix (/fleet/: one cluster can hold several
fleets), over TLS with --etcd-cacert and a client certificate --etcd-cert,
--etcd-key. A write the API acknowledges is then committed to a quorum of
the members. The keys stay files in <data-dir>: secrets.key (it encrypts
Secrets in the store), ca.crt and ca.key, signing.key; every hub of a fleet
needs the same ones, copied from the first hub. A hub remembers its fleet
(<data-dir>/fleet-id) and refuses an etcd prefix holding another fleet, or a
store whose Secrets another key encrypted. See README "Running several hubs".

Several hubs on one etcd store elect a leader on an etcd lease
(--leader-lease, 10s): only the leader runs the controller and the rollouts
and publishes desired states, every commit it makes fenced on its
leadership; only its embedded broker accepts devices (standbys answer
"server unavailable"). Every hub serves the API. A hub that loses the
leadership exits (run it under systemd with Restart=always) and comes back
as a standby. fleet get hubs or fleet-hub status lists them.

Every flag can also be set in the environment as FLEET_HUB_<FLAG> (for
example FLEET_HUB_DATA_DIR) or in a YAML file given with --config, whose keys
are the flag names (data-dir: /var/lib/fleet-hub). A flag wins over the
environment, which wins over the config file.`
	rootExample = `  # Start a hub with data in ./fleet-data and the API on 127.0.0.1:8080
  fleet-hub

  # Keep data in /var/lib/fleet-hub; tell clients and devices the public name
  fleet-hub --data-dir /var/lib/fleet-hub --advertise-http-url https://hub.example.com:8443 \
    --advertise-mqtt-url ssl://hub.example.com:8883

  # The same through the environment
  FLEET_HUB_DATA_DIR=/var/lib/fleet-hub FLEET_HUB_TLS_SAN=hub.example.com fleet-hub

  # Your own certificate (reloaded on SIGHUP), and no plain listener at all
  fleet-hub --tls-cert hub.crt --tls-key hub.key --http-addr "" --mqtt-addr ""

  # Use an external Mosquitto instead of the embedded broker
  fleet-hub mosquitto-config --out /etc/mosquitto/fleet
  fleet-hub --broker tcp://127.0.0.1:1883

  # A backup every hour into /backups, the last 48 kept
  fleet-hub --backup-dir /backups --backup-every 1h --backup-keep 48 --backup-passphrase-file /root/backup.pass
  # Keep the state in a 3-member etcd cluster, over TLS with a client certificate
  fleet-hub --store etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379 --etcd-prefix /fleet/prod/ \
    --etcd-cacert /etc/fleet/etcd-ca.crt --etcd-cert /etc/fleet/hub-etcd.crt --etcd-key /etc/fleet/hub-etcd.key

  # A second hub on the same etcd (same secrets.key, ca.crt, ca.key and signing.key)
  fleet-hub --store etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379 --hub-id hub-2 --leader-lease 10s
  fleet-hub status     # which hub leads, and the leases

  # Settings from a file
  fleet-hub --config /etc/fleet/hub.yaml

  # Every device in Home Assistant (log Home Assistant in with: fleet monitor add ha)
  fleet-hub --homeassistant-discovery`
)

func newRootCmd(getenv func(string) string, serve serveFunc) *cobra.Command {
	var s settings
	root := &cobra.Command{
		Use:           "fleet-hub",
		Short:         "Run the Fleet hub: store, HTTP API and device control plane",
		Long:          rootLong,
		Example:       rootExample,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return applySources(cmd, getenv)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve(cmd, s)
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return fmt.Errorf("%w (see fleet-hub --help)", err)
	})
	bindFlags(root, &s)
	root.AddCommand(newVersionCmd(), newAdminTokenCmd(&s), newMosquittoConfigCmd(&s),
		newSigningKeyCmd(&s), newSigningKeyRotateCmd(&s, "rotate-signing-key"), newCACmd(&s))
	root.AddCommand(newBackupCmd(&s), newRestoreCmd(&s), newMigrateCmd())
	root.AddCommand(newStatusCmd(&s)) // status.go
	return root
}

// bindFlags binds the flags of fleet-hub to s: the persistent ones that
// every command shares, and those that only serve.
func bindFlags(root *cobra.Command, s *settings) {
	f := root.PersistentFlags()
	f.StringVar(&s.DataDir, "data-dir", hub.DefaultDataDir, "directory of the store and admin.conf")
	f.StringVar(&s.HTTPAddr, "http-addr", hub.DefaultHTTPAddr, "listen address of the plain HTTP API, loopback only without --insecure-plaintext (port 0: any free port; empty: off)")
	f.StringVar(&s.HTTPSAddr, "https-addr", hub.DefaultHTTPSAddr, "listen address of the HTTPS API (empty: off)")
	f.BoolVar(&s.InsecurePlaintext, "insecure-plaintext", false, "allow plain HTTP and MQTT listeners on non-loopback addresses (tokens cross the network in clear)")
	f.StringArrayVar(&s.TLSSANs, "tls-san", nil, "extra DNS name or IP address of the hub's own server certificate (repeatable)")
	f.StringVar(&s.AdvertiseHTTPURL, "advertise-http-url", "", "HTTPS URL other machines reach the API at (a name of the server certificate)")
	f.StringVar(&s.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&s.Config, "config", "", "YAML file of settings, keyed by flag name")
	m := &s.MQTT
	d := defaultMQTTSettings
	f.StringVar(&m.TopicPrefix, "topic-prefix", d.TopicPrefix, "prefix of every Fleet MQTT topic")
	f.StringVar(&m.Broker, "broker", "", "URL of an external MQTT broker (tcp://HOST:PORT or ssl://HOST:PORT); empty runs the embedded broker")
	f.StringVar(&m.BrokerUsername, "broker-username", d.BrokerUsername, "the hub's MQTT username on the external broker")
	f.StringVar(&m.BrokerPassword, "broker-password", "", "the hub's MQTT password on the external broker (default: <data-dir>/mqtt-password)")
	f.StringVar(&m.BrokerPasswordFile, "broker-password-file", "", "file holding the hub's MQTT password on the external broker")
	lf := root.Flags()
	lf.StringVar(&m.Addr, "mqtt-addr", d.Addr, "listen address of the embedded broker's plain MQTT listener, loopback only without --insecure-plaintext (port 0: any free port; empty: off)")
	lf.StringVar(&m.TLSAddr, "mqtts-addr", d.TLSAddr, "listen address of the embedded broker's MQTT-over-TLS listener (empty: off)")
	lf.StringVar(&m.TLSCert, "tls-cert", "", "PEM certificate (chain) of the HTTPS and MQTT TLS listeners, reloaded on SIGHUP (default: one the hub's own CA signs)")
	lf.StringVar(&m.TLSKey, "tls-key", "", "PEM private key of --tls-cert")
	lf.DurationVar(&s.TLSCertLifetime, "tls-cert-lifetime", 0, "lifetime of the hub's own server certificate (0: a year, 8760h); the running hub renews it once a third is left (at most 720h before its end), without a restart or a disconnect (e.g. 2m to watch it happen)")
	lf.StringVar(&m.ClientCerts, "mqtt-client-certs", d.ClientCerts, "client certificates on the MQTT TLS listener, signed by the hub's CA (devices get one at enrollment): off, optional (one presented must be the device's own) or required (devices over TLS must present theirs; bootstrap clients and monitors need none)")
	lf.StringVar(&m.AdvertiseURL, "advertise-mqtt-url", "", "MQTT URL devices are told to use (GET /v1/info); default derived from the listener or --broker")
	lf.StringVar(&m.BrokerCA, "broker-ca", "", "PEM CA bundle to verify an ssl:// external broker")
	lf.StringVar(&m.BrokerClientID, "broker-client-id", "", "the hub's stable MQTT client ID on the external broker (default: the username)")
	lf.StringVar(&m.MosquittoConfigDir, "mosquitto-config-dir", "", "with --broker: directory of Mosquitto's passwd and acl files, which the hub rewrites after every device, token or credential change")
	lf.StringVar(&m.MosquittoPIDFile, "mosquitto-pid-file", "", "with --mosquitto-config-dir: Mosquitto's pid_file; the hub sends that process SIGHUP after rewriting the files")
	lf.DurationVar(&s.AuditRetention, "audit-retention", store.DefaultAuditRetention, "how long the audit trail keeps entries (2160h: 90 days; the oldest go first; -1s: forever)")
	lf.StringVar(&s.AuditMaxBytes, "audit-max-bytes", "100Mi", "size the audit trail may take in the store (100Mi, 1Gi; the oldest entries go first; -1: no bound)")
	lf.DurationVar(&s.HistoryInterval, "history-interval", hub.DefaultHistoryInterval, "width of one sample of the dashboard's charts (devices online, each device's memory, disk and temperature); they keep 288 samples: 5m is 24 h")
	lf.StringVar(&s.Store, "store", "badger", "where the state lives: badger (in <data-dir>/store) or etcd://HOST:PORT[,HOST:PORT…] (an etcd cluster)")
	lf.StringVar(&s.EtcdPrefix, "etcd-prefix", "", "with --store etcd://…: prefix of this fleet's keys, so one cluster holds several fleets (default "+store.DefaultEtcdPrefix+")")
	lf.StringVar(&s.EtcdCACert, "etcd-cacert", "", "with --store etcd://…: PEM CA of the etcd members' certificates (turns TLS on)")
	lf.StringVar(&s.EtcdCert, "etcd-cert", "", "with --store etcd://…: PEM client certificate the hub presents to etcd (with --etcd-key)")
	lf.StringVar(&s.EtcdKey, "etcd-key", "", "with --store etcd://…: PEM private key of --etcd-cert")
	lf.StringVar(&s.HubID, "hub-id", "", "with --store etcd://…: this hub's name among the fleet's hubs (fleet get hubs); default: the host name and a random suffix, kept in <data-dir>/hub-id")
	lf.DurationVar(&s.LeaderLease, "leader-lease", leader.DefaultLeaseTTL, "with --store etcd://…: TTL of this hub's etcd lease, which its leadership hangs on: a dead leader is replaced within it (whole seconds, at least 2s)")
	lf.DurationVar(&m.ResyncInterval, "resync-interval", d.ResyncInterval, "how often the controller recomputes every device's desired state from the store")
	b := &s.Backup
	lf.StringVar(&b.Dir, "backup-dir", "", "write an encrypted backup of the hub (store, CA, keys) into this directory every --backup-every; empty: no scheduled backups")
	lf.DurationVar(&b.Every, "backup-every", hub.DefaultBackupEvery, "interval of scheduled backups: what a restore can lose at most")
	lf.IntVar(&b.Keep, "backup-keep", 48, "how many scheduled backups to keep (the oldest are removed)")
	lf.StringVar(&b.Key.PassphraseFile, "backup-passphrase-file", "", "file holding the passphrase of scheduled backups (default: $"+backup.EnvPassphrase+")")
	lf.StringArrayVar(&b.Key.Recipients, "backup-recipient", nil, "encrypt scheduled backups to this age public key (age1…) instead of a passphrase (repeatable)")
	lf.StringVar(&b.Key.RecipientFile, "backup-recipient-file", "", "file of age public keys, one a line, to encrypt scheduled backups to")
	lf.BoolVar(&s.HomeAssistantDiscovery, "homeassistant-discovery", false, "publish Home Assistant MQTT discovery configs (retained, under homeassistant/) for every device, read by a monitor credential; a deleted device's are cleared")
	lf.DurationVar(&m.StaleAfter, "stale-after", d.StaleAfter, "0 (default): a device is online while its MQTT session is (its keepalive and last will keep the online topic true); a duration: a device not heard from for this long also counts as offline, for agents run with --status-heartbeat below it (e.g. --stale-after 3h with agents' --status-heartbeat 1h, against a broker that may lose last wills)")
}

// serveHub runs the hub until the command's context ends.
func serveHub(cmd *cobra.Command, s settings) error {
	log, err := newLogger(s.LogLevel)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	m := s.MQTT
	pw, err := m.brokerPassword()
	if err != nil {
		return err
	}
	auditBytes, err := auditMaxBytes(s.AuditMaxBytes)
	if err != nil {
		return err
	}
	var backupKey backup.Key
	if s.Backup.Dir != "" {
		if backupKey, err = s.Backup.Key.Key("--backup-dir"); err != nil {
			return err
		}
	}
	return hub.Run(cmd.Context(), hub.Options{
		BackupDir:         s.Backup.Dir,
		BackupEvery:       s.Backup.Every,
		BackupKeep:        s.Backup.Keep,
		BackupKey:         backupKey,
		AuditRetention:    s.AuditRetention,
		AuditMaxBytes:     auditBytes,
		HistoryInterval:   s.HistoryInterval,
		DataDir:           s.DataDir,
		HTTPAddr:          orOff(s.HTTPAddr),
		HTTPSAddr:         orOff(s.HTTPSAddr),
		TLSSANs:           s.TLSSANs,
		TLSCertLifetime:   s.TLSCertLifetime,
		AdvertiseHTTPURL:  s.AdvertiseHTTPURL,
		InsecurePlaintext: s.InsecurePlaintext,
		Logger:            log,
		Version:           version(),
		Ready: func(i hub.Info) {
			fmt.Fprintf(out, "fleet-hub %s: API on %s; MQTT for devices at %s; admin config (hub URL and token for the fleet CLI) in %s\n",
				version(), strings.Join(nonEmpty(i.URL, i.HTTPSURL), " and "), i.MQTTURL, i.AdminConfig)
			if i.CAHash != "" {
				fmt.Fprintf(out, "hub CA %s (in %s)\n", i.CAHash, filepath.Join(s.DataDir, pki.CACertName))
			}
		},
		MQTTAddr:           orOff(m.Addr),
		MQTTTLSAddr:        orOff(m.TLSAddr),
		TLSCertFile:        m.TLSCert,
		TLSKeyFile:         m.TLSKey,
		MQTTClientCerts:    m.ClientCerts,
		AdvertiseMQTTURL:   m.AdvertiseURL,
		Topics:             schema.Topics{Prefix: m.TopicPrefix},
		Broker:             m.Broker,
		BrokerUsername:     m.BrokerUsername,
		BrokerPassword:     pw,
		BrokerCAFile:       m.BrokerCA,
		BrokerClientID:     m.BrokerClientID,
		MosquittoConfigDir: m.MosquittoConfigDir,
		MosquittoPIDFile:   m.MosquittoPIDFile,
		ResyncInterval:     m.ResyncInterval,
		StaleAfter:         m.StaleAfter,

		HomeAssistantDiscovery: s.HomeAssistantDiscovery,
		Store:                  s.Store,
		EtcdPrefix:             s.EtcdPrefix,
		EtcdCACertFile:         s.EtcdCACert,
		EtcdCertFile:           s.EtcdCert,
		EtcdKeyFile:            s.EtcdKey,
		HubID:                  s.HubID,
		LeaderLease:            s.LeaderLease,
	})
}

// auditMaxBytes reads --audit-max-bytes: a quantity (100Mi), or -1 for
// no bound.
func auditMaxBytes(v string) (int64, error) {
	if strings.TrimSpace(v) == "-1" {
		return -1, nil
	}
	n, err := schema.ParseMemory(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("--audit-max-bytes %q: want a size such as 100Mi or 1Gi, or -1 for no bound", v)
	}
	return n, nil
}

// orOff maps an empty listen address (the flag set to "") to hub.Off.
func orOff(addr string) string {
	if strings.TrimSpace(addr) == "" {
		return hub.Off
	}
	return addr
}

// nonEmpty returns the strings that are not empty, in order.
func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// newLogger logs text to stderr at the level.
func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.TrimSpace(level))); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}
