package main

import (
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/fleetmq/fleet/edgeagent"
	"github.com/fleetmq/fleet/edgeagent/enroll"
	"github.com/fleetmq/fleet/edgeagent/reconcile"
	"github.com/fleetmq/fleet/edgeagent/runtime/containerd"
	"github.com/fleetmq/fleet/edgeagent/selfupdate"
	"github.com/fleetmq/fleet/edgeagent/session"
	"github.com/fleetmq/fleet/edgeagent/trust"
	"github.com/fleetmq/fleet/schema"
)

// envPrefix prefixes the environment variable of every flag.
const envPrefix = "FLEET_AGENT_"

// config is the agent's configuration. Flags, config-file keys and
// environment variables (FLEET_AGENT_ + upper snake case) share one name.
type config struct {
	// Broker is the broker list: one URL, or several comma-separated
	// (in the config file also a YAML list), the preferred first.
	Broker           brokerList `json:"broker,omitempty"`
	Device           string     `json:"device,omitempty"`
	Token            string     `json:"token,omitempty"`
	TokenFile        string     `json:"token-file,omitempty"`
	StateDir         string     `json:"state-dir,omitempty"`
	ContainerdSocket string     `json:"containerd-socket,omitempty"`
	Namespace        string     `json:"namespace,omitempty"`
	CA               string     `json:"ca,omitempty"`
	// CAFile is --ca under the name the hub's commands print.
	CAFile string `json:"ca-file,omitempty"`
	// CAHash pins the hub's CA by hash (schema.CAHash), as
	// `fleet token create` prints it.
	CAHash         string `json:"ca-hash,omitempty"`
	ResyncInterval string `json:"resync-interval,omitempty"`
	// KeepAlive and StatusHeartbeat: what an idle device sends (issue 31).
	KeepAlive       string `json:"keepalive,omitempty"`
	StatusHeartbeat string `json:"status-heartbeat,omitempty"`
	ImageGCMinFree  string `json:"image-gc-min-free,omitempty"`
	ReleasePages    string `json:"release-startup-pages,omitempty"`
	LogLevel        string `json:"log-level,omitempty"`
	TopicPrefix     string `json:"topic-prefix,omitempty"`
	// HubSigningKey pins the hub's desired-state signing key: base64,
	// or @FILE (edgeagent/trust).
	HubSigningKey string `json:"hub-signing-key,omitempty"`
	// Join is a join string (schema.ParseJoin), or @FILE holding one: it
	// fills broker, ca-hash, hub-signing-key, device and token (or
	// bootstrap-token); a flag set to something else is an error.
	Join string `json:"join,omitempty"`
	// InsecureTrustFirstKey pins the key of the first signed desired
	// state when none is pinned (trust on first use; off by default).
	InsecureTrustFirstKey bool `json:"insecure-trust-first-key,omitempty"`

	// BootstrapToken(File) and NameFrom: self-enrollment (edgeagent/enroll).
	BootstrapToken     string `json:"bootstrap-token,omitempty"`
	BootstrapTokenFile string `json:"bootstrap-token-file,omitempty"`
	NameFrom           string `json:"name-from,omitempty"`

	// LogMaxSize and LogMaxFiles bound each container's log on the
	// device (schema.ParseLogMaxSize/ParseLogMaxFiles; a pod's
	// fleet/log-max-* annotations win). LogWriter is the program the shim
	// runs to write them: empty for this binary, "off" for the shim's own
	// file, copy-truncated every 30 s.
	LogMaxSize  scalar `json:"log-max-size,omitempty"`
	LogMaxFiles scalar `json:"log-max-files,omitempty"`
	LogWriter   string `json:"log-writer,omitempty"`

	// UpgradeDir and UpgradeTrialDeadline: the agent's own upgrades
	// (edgeagent/selfupdate).
	UpgradeDir           string `json:"upgrade-dir,omitempty"`
	UpgradeTrialDeadline string `json:"upgrade-trial-deadline,omitempty"`

	// Registry is file-only: mirrors, plain-HTTP hosts and credentials
	// for image pulls, handed to the containerd runtime.
	Registry containerd.RegistryConfig `json:"registry,omitzero"`

	configFile string
}

func (c *config) bind(fs *pflag.FlagSet) {
	fs.StringVar(&c.Join, "join", "", "join string (fleetjoin1:..., as fleet device add or fleet token create prints it), or @FILE holding it: sets --broker, --ca-hash, --hub-signing-key, --device and the token; those flags, if given too, must agree")
	fs.StringVar((*string)(&c.Broker), "broker", "tcp://localhost:1883", "MQTT broker URL, or several comma-separated (ssl://h1:8883,ssl://h2:8883: one per hub, the preferred first): the agent connects to the first that accepts it and, when the connection is lost or refused (a standby hub's broker), moves to the next with jittered backoff, round-robin. The default is a hub's plain loopback listener on this machine; a remote hub is ssl://HOST:8883 (the join string carries the list)")
	fs.StringVar(&c.Device, "device", "", "this device's name (MQTT username)")
	fs.StringVar(&c.Token, "token", "", "device token (MQTT password); prefer --token-file")
	fs.StringVar(&c.TokenFile, "token-file", "", "file holding the device token")
	fs.StringVar(&c.BootstrapToken, "bootstrap-token", "", "enroll with this bootstrap token (fleet token create) if the state dir holds no device token yet; prefer --bootstrap-token-file")
	fs.StringVar(&c.BootstrapTokenFile, "bootstrap-token-file", "", "file holding the bootstrap token")
	fs.StringVar(&c.NameFrom, "name-from", string(enroll.FromHostname), "when enrolling without --device, name the device after its hostname, serial (/proc/device-tree/serial-number) or machine-id (/etc/machine-id)")
	fs.StringVar(&c.StateDir, "state-dir", edgeagent.DefaultStateDir, "directory for persisted state and container logs")
	fs.StringVar(&c.ContainerdSocket, "containerd-socket", containerd.DefaultSocket, "containerd socket")
	fs.StringVar(&c.Namespace, "namespace", containerd.DefaultNamespace, "containerd namespace of Fleet's containers")
	fs.StringVar(&c.CA, "ca", "", "PEM file of the CA that signed the broker's certificate (TLS brokers): the only CA trusted; same as --ca-file")
	fs.StringVar(&c.CAFile, "ca-file", "", "same as --ca")
	fs.StringVar(&c.CAHash, "ca-hash", "", "pin the hub's CA by its hash (sha256:..., as fleet token create prints it): the first TLS contact verifies the broker by it and saves the CA as <state-dir>/hub-ca.crt, the only CA trusted from then on")
	fs.StringVar(&c.ResyncInterval, "resync-interval", "30s", "period of full reconciles (local: a resync that changes nothing sends nothing)")
	fs.StringVar(&c.KeepAlive, "keepalive", session.DefaultKeepAlive.String(), "MQTT keepalive: an idle device sends one ping this often, and the broker declares it offline (its last will) after 1.5 times this without a word; shorter if a NAT on the way forgets idle connections sooner")
	fs.StringVar(&c.StatusHeartbeat, "status-heartbeat", "0", "republish an unchanged status this often (0: never; presence comes from the MQTT session). Only with a hub run with --stale-after above it, against a broker that may lose last wills")
	fs.StringVar(&c.ImageGCMinFree, "image-gc-min-free", "10%", "keep this much of containerd's disk free (a percentage such as 10%, or a size such as 1Gi; 0: no floor): images the agent pulled and no pod uses are deleted once a rollout has converged, and the previous revision's images (kept for a fast undo) too when free space falls below it")
	fs.StringVar(&c.ReleasePages, "release-startup-pages", "5s", "this long after connecting to containerd (start-up is then about over), hand the kernel back the pages of the agent's own binary that start-up read, and the heap it grew, so that its RSS is what it goes on using; then again after each burst of work, once it is over (Linux 5.4+; 0: never)")
	fs.StringVar((*string)(&c.LogMaxSize), "log-max-size", "10Mi", "cap of each file of a container's log (16Ki to 1Gi): the log writer rotates it by size as the container writes, so a container's current log takes at most log-max-size x (log-max-files + 1) on disk, and its previous run's as much again; a pod's fleet/log-max-size annotation wins")
	fs.StringVar((*string)(&c.LogMaxFiles), "log-max-files", "1", "rotated files kept of each container's log besides the live one (1 to 20); a pod's fleet/log-max-files annotation wins")
	fs.StringVar(&c.LogWriter, "log-writer", "", "program containerd's shim runs to write each container's log (\"fleet-agent log-writer\"; empty: this binary, by its absolute path; \"off\": the shim writes the file itself and the agent copy-truncates it every 30s, which does not bound a burst). Set it when the shim does not see this binary at its path, as for an agent run in a container")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.TopicPrefix, "topic-prefix", schema.DefaultTopicPrefix, "MQTT topic prefix (must match the hub's)")
	fs.StringVar(&c.HubSigningKey, "hub-signing-key", "", "pin the hub's desired-state signing key (base64, as GET /v1/info signingKey shows it, or @FILE; the join string carries it): otherwise the key pinned earlier, or the one enrollment over verified TLS returns. With no key pinned the agent runs nothing from the broker")
	fs.BoolVar(&c.InsecureTrustFirstKey, "insecure-trust-first-key", false, "with no hub signing key pinned, run unsigned desired states and pin the key of the first signed one: whoever publishes on the device's topic first (a rogue on an external broker) owns the device. Only for hubs you reach over a trusted network")
	fs.StringVar(&c.UpgradeDir, "upgrade-dir", selfupdate.DefaultDir, "directory of the agent's binaries (<version> files, current and next links; install.sh makes it): the agent replaces itself with the release its signed desired state names only when it runs from <upgrade-dir>/current")
	fs.StringVar(&c.UpgradeTrialDeadline, "upgrade-trial-deadline", selfupdate.DefaultTrialDeadline.String(), "how long a new agent release has, in its trial, to connect to the broker and report its status before the running agent kills it and goes back to itself (10s to 1h)")
	fs.StringVar(&c.configFile, "config", "", "YAML config file (same keys as the flags, plus registry)")
}

// resolve fills every flag the command line did not set from the
// environment, then from the config file.
func (c *config) resolve(fs *pflag.FlagSet) error {
	file := map[string]string{}
	if c.configFile == "" {
		c.configFile = os.Getenv(envPrefix + "CONFIG")
	}
	if c.configFile != "" {
		fc, err := loadConfigFile(c.configFile)
		if err != nil {
			return err
		}
		c.Registry = fc.Registry
		file, err = scalarKeys(fc)
		if err != nil {
			return err
		}
	}
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "config" {
			return
		}
		env := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		v, ok := os.LookupEnv(env)
		if !ok {
			v, ok = file[f.Name]
		}
		if ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", f.Name, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if _, err := c.brokers(); err != nil {
		return err
	}
	if err := c.applyJoin(fs); err != nil {
		return err
	}
	if c.Token != "" && c.TokenFile != "" {
		return errors.New("--token and --token-file are mutually exclusive")
	}
	if c.CAFile != "" {
		if c.CA != "" && c.CA != c.CAFile {
			return errors.New("--ca and --ca-file name the same setting: give one")
		}
		c.CA = c.CAFile
	}
	if c.CAHash != "" {
		h, err := schema.ParseCAHash(c.CAHash)
		if err != nil {
			return fmt.Errorf("--ca-hash: %w", err)
		}
		c.CAHash = h
	}
	if c.BootstrapToken != "" && c.BootstrapTokenFile != "" {
		return errors.New("--bootstrap-token and --bootstrap-token-file are mutually exclusive")
	}
	if c.bootstrap() && (c.Token != "" || c.TokenFile != "") {
		return errors.New("--bootstrap-token(-file) enrolls a device that has no token yet: it is mutually exclusive with --token and --token-file")
	}
	if _, err := enroll.ParseNameSource(c.NameFrom); err != nil {
		return fmt.Errorf("--name-from: %w", err)
	}
	if c.Device == "" && !c.bootstrap() {
		// An enrolled device finds its name beside its saved token.
		if _, err := enroll.Stored(c.StateDir); err != nil {
			return errors.New("--device is required (or enroll the device with --bootstrap-token-file)")
		}
	}
	if c.Device != "" {
		if err := schema.ValidateName(c.Device); err != nil {
			return fmt.Errorf("--device: %w", err)
		}
	}
	if _, err := c.resync(); err != nil {
		return err
	}
	if _, err := c.trialDeadline(); err != nil {
		return err
	}
	if _, err := c.hubSigningKey(); err != nil {
		return err
	}
	if _, err := c.imageGCMinFree(); err != nil {
		return err
	}
	if _, _, err := c.logLimits(); err != nil {
		return err
	}
	if w := c.LogWriter; w != "" && w != "off" && !filepath.IsAbs(w) {
		return fmt.Errorf("--log-writer %q: want an absolute path, or off", w)
	}
	if p := c.TopicPrefix; p == "" || strings.ContainsAny(p, "+#") || strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") {
		return fmt.Errorf("--topic-prefix %q: want levels such as fleet/v1, without wildcards or leading/trailing '/'", p)
	}
	return nil
}

func loadConfigFile(path string) (config, error) {
	var fc config
	b, err := os.ReadFile(path)
	if err != nil {
		return fc, fmt.Errorf("config file: %w", err)
	}
	if err := yaml.UnmarshalStrict(b, &fc); err != nil {
		return fc, fmt.Errorf("config file %s: %w", path, err)
	}
	return fc, nil
}

// scalarKeys returns the string-valued keys a config file set.
func scalarKeys(fc config) (map[string]string, error) {
	b, err := json.Marshal(fc)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	out := map[string]string{}
	for k, v := range m {
		switch v := v.(type) {
		case string:
			if v != "" {
				out[k] = v
			}
		case bool:
			out[k] = strconv.FormatBool(v)
		}
	}
	return out, nil
}

// brokerTLS returns the TLS configuration of the agent's connections to
// a TLS broker, and the trust it uses (enroll.BrokerTLS); nil for a plain
// broker. Called again after enrollment, it finds the CA that the
// enrollment verified by --ca-hash and saved.
//
// With several brokers, the one configuration verifies each of them by
// the same trust, for its own name (enroll.ForBroker): the CA file, the
// saved CA or the pinned CA hash covers every broker of the list. So a
// CA or CA hash given with a list that mixes plain and TLS brokers is
// refused: the plain ones would escape the pin.
func (c *config) brokerTLS(log *slog.Logger) (*tls.Config, string, error) {
	us, err := c.brokerURLs()
	if err != nil {
		return nil, "", err
	}
	var first *url.URL
	var plain []string
	for _, u := range us {
		switch {
		case !schema.IsTLSBroker(u):
			plain = append(plain, u.Redacted())
		case first == nil:
			first = u
		}
	}
	pinned := c.CA != "" || c.CAHash != ""
	switch {
	case first == nil && pinned:
		return nil, "", fmt.Errorf("--ca/--ca-file or --ca-hash is set but --broker %s is not TLS (use ssl://, tls:// or mqtts://)", c.Broker)
	case first == nil:
		return nil, "", nil
	case pinned && len(plain) > 0:
		return nil, "", fmt.Errorf("--ca/--ca-file or --ca-hash pins the hub's CA for every broker, but --broker lists plain ones (%s) that it cannot cover: make every broker TLS (ssl://…)", strings.Join(plain, ", "))
	}
	return enroll.BrokerTLS(enroll.TrustOptions{CAFile: c.CA, CAHash: c.CAHash, StateDir: c.StateDir, Logger: log, ServerName: first.Hostname()})
}

// brokers is --broker as a list, each URL checked (schema.ParseBrokerList:
// an error names the entry's position).
func (c *config) brokers() ([]string, error) {
	list, err := schema.ParseBrokerList(string(c.Broker))
	if err != nil {
		return nil, fmt.Errorf("--broker: %w", err)
	}
	return list, nil
}

// brokerURLs is brokers parsed.
func (c *config) brokerURLs() ([]*url.URL, error) {
	list, err := c.brokers()
	if err != nil {
		return nil, err
	}
	us, err := schema.CheckBrokerList(list)
	if err != nil {
		return nil, fmt.Errorf("--broker: %w", err)
	}
	return us, nil
}

// brokerHost is the host of the first TLS broker of --broker ("" if
// there is none): the name a TLS configuration is made for, before
// enroll.ForBroker sets each broker's own.
func (c *config) brokerHost() string {
	us, err := c.brokerURLs()
	if err != nil {
		return ""
	}
	for _, u := range us {
		if schema.IsTLSBroker(u) {
			return u.Hostname()
		}
	}
	return ""
}

// brokerList is the broker setting: a string (one URL, or several
// comma-separated) everywhere, and in the config file also a YAML list
// of URLs, kept as the comma-separated string.
type brokerList string

func (b *brokerList) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '[' {
		var list []string
		if err := json.Unmarshal(data, &list); err != nil {
			return fmt.Errorf("broker: want a URL, a comma-separated list of URLs, or a list of URLs: %w", err)
		}
		for i, s := range list {
			if strings.Contains(s, ",") {
				return fmt.Errorf("broker: entry %d of %d holds a comma: give one URL per entry", i+1, len(list))
			}
		}
		*b = brokerList(strings.Join(list, ","))
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("broker: want a URL, a comma-separated list of URLs, or a list of URLs: %w", err)
	}
	*b = brokerList(s)
	return nil
}

// bootstrap reports whether a bootstrap token is configured.
func (c *config) bootstrap() bool { return c.BootstrapToken != "" || c.BootstrapTokenFile != "" }

// bootstrapToken reads the bootstrap token.
func (c *config) bootstrapToken() (string, error) {
	if c.BootstrapTokenFile == "" {
		return strings.TrimSpace(c.BootstrapToken), nil
	}
	b, err := os.ReadFile(c.BootstrapTokenFile)
	if err != nil {
		return "", fmt.Errorf("bootstrap token file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("bootstrap token file %s is empty", c.BootstrapTokenFile)
	}
	return t, nil
}

func (c *config) token() (string, error) {
	if c.TokenFile == "" {
		return c.Token, nil
	}
	b, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("token file %s is empty", c.TokenFile)
	}
	return t, nil
}

func (c *config) resync() (time.Duration, error) {
	d, err := time.ParseDuration(c.ResyncInterval)
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("--resync-interval %q: want a duration of at least 1s, such as 30s", c.ResyncInterval)
	}
	return d, nil
}

// trialDeadline reads --upgrade-trial-deadline.
func (c *config) trialDeadline() (time.Duration, error) {
	d, err := time.ParseDuration(c.UpgradeTrialDeadline)
	if err != nil || d < 10*time.Second || d > time.Hour {
		return 0, fmt.Errorf("--upgrade-trial-deadline %q: want a duration between 10s and 1h, such as 2m", c.UpgradeTrialDeadline)
	}
	return d, nil
}

// keepAlive reads --keepalive.
func (c *config) keepAlive() (time.Duration, error) {
	d, err := time.ParseDuration(c.KeepAlive)
	if err != nil || d < 5*time.Second || d > 18*time.Hour {
		return 0, fmt.Errorf("--keepalive %q: want a duration between 5s and 18h, such as 120s", c.KeepAlive)
	}
	return d, nil
}

// statusHeartbeat reads --status-heartbeat (0: none).
func (c *config) statusHeartbeat() (time.Duration, error) {
	if c.StatusHeartbeat == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(c.StatusHeartbeat)
	if err != nil || d != 0 && d < 10*time.Second {
		return 0, fmt.Errorf("--status-heartbeat %q: want 0 (none) or a duration of at least 10s, such as 1h", c.StatusHeartbeat)
	}
	return d, nil
}

func (c *config) imageGCMinFree() (reconcile.DiskFloor, error) {
	f, err := reconcile.ParseDiskFloor(c.ImageGCMinFree)
	if err != nil {
		return f, fmt.Errorf("--image-gc-min-free: %w", err)
	}
	return f, nil
}

// logLimits reads --log-max-size and --log-max-files.
func (c *config) logLimits() (int64, int, error) {
	size, err := schema.ParseLogMaxSize(string(c.LogMaxSize))
	if err != nil {
		return 0, 0, fmt.Errorf("--log-max-size: %w", err)
	}
	files, err := schema.ParseLogMaxFiles(string(c.LogMaxFiles))
	if err != nil {
		return 0, 0, fmt.Errorf("--log-max-files: %w", err)
	}
	return size, files, nil
}

// runtimeOptions are the containerd runtime's options.
func (c *config) runtimeOptions(log *slog.Logger) (containerd.Options, error) {
	logMax, logFiles, err := c.logLimits()
	if err != nil {
		return containerd.Options{}, err
	}
	return containerd.Options{
		Socket:      c.ContainerdSocket,
		Namespace:   c.Namespace,
		Registry:    c.Registry,
		Logger:      log.With("component", "containerd"),
		LogWriter:   c.logWriter(log),
		LogMaxBytes: logMax,
		LogMaxFiles: logFiles,
	}, nil
}

// logWriter is the runtime's Options.LogWriter for --log-writer: this
// binary by default, none for "off" (or when this binary's path is
// unknown).
func (c *config) logWriter(log *slog.Logger) string {
	switch c.LogWriter {
	case "off":
		return ""
	case "":
		exe, err := os.Executable()
		if err != nil {
			log.Warn("no log writer: the path of this binary is unknown; containers' logs are copy-truncated", "err", err)
			return ""
		}
		return exe
	}
	return c.LogWriter
}

// scalar is a config-file value that may be written as a string or as a
// bare number (log-max-files: 3), kept as its text.
type scalar string

func (s *scalar) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, (*string)(s))
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	*s = scalar(n)
	return nil
}

func (c *config) releasePages() (time.Duration, error) {
	d, err := time.ParseDuration(c.ReleasePages)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("--release-startup-pages %q: want a duration such as 5s, or 0 for never", c.ReleasePages)
	}
	return d, nil
}

func newLogger(level string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// hubSigningKey is --hub-signing-key, nil when not set.
func (c *config) hubSigningKey() (ed25519.PublicKey, error) {
	if c.HubSigningKey == "" {
		return nil, nil
	}
	k, err := trust.ReadKeyArg(c.HubSigningKey)
	if err != nil {
		return nil, fmt.Errorf("--hub-signing-key: %w", err)
	}
	return k, nil
}
