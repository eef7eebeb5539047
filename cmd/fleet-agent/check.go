package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/broker/mqttio"
	"github.com/fleetmq/fleet/edgeagent/enroll"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/runtime/containerd"
	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/edgeagent/trust"
	"github.com/fleetmq/fleet/schema"
)

func newCheckCmd(stdout io.Writer) *cobra.Command {
	var cfg config
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "check [flags]",
		Short: "Check this device's setup: identity, state dir, containerd, broker, desired state",
		Long: `Check, with the agent's own configuration (the same flags, FLEET_AGENT_*
variables and --config file), everything the agent needs, and say what is
wrong in words an installer can act on:

  identity       the device name and where its token comes from (the token
                 itself is never printed)
  state dir      exists and is writable; the desired state persisted there
  containerd     the socket answers, its version, the snapshotter, the
                 containers in the namespace
  broker         the broker accepts the device's name and token; with a
                 list of brokers (--broker a,b,c), every one is tried and
                 the check says which answer: the agent needs one that
                 accepts it (a standby hub's broker refuses, as it should)
  desired state  the device may subscribe to its desired topic, and the hub
                 has a desired state retained for it

It changes nothing: it connects to the broker under its own client ID,
publishes nothing (the device does not show online, and a running agent is
not disturbed), and does not enroll a device that has no token yet. A
device waiting to enroll gets the broker checked for reachability only.

Each line starts with ok, warn or FAIL. The exit status is 1 when any check
failed.`,
		Example: `  # On the device, with the agent's configuration
  sudo fleet-agent check --config /etc/fleet/agent.yaml

  # Or with flags, as the systemd unit passes them
  sudo fleet-agent check --broker tcp://10.0.0.5:1883 --device pi-1 --token-file /etc/fleet/token

  # Several hubs: which of them accepts the device now
  sudo fleet-agent check --broker ssl://h1:8883,ssl://h2:8883 --ca-hash sha256:... --device pi-1 --token-file /etc/fleet/token`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.resolve(cmd.Flags()); err != nil {
				return err
			}
			if timeout <= 0 {
				return fmt.Errorf("--timeout %s: must be positive", timeout)
			}
			return runCheck(cmd.Context(), cfg, stdout, timeout)
		},
	}
	cfg.bind(cmd.Flags())
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "time limit of each check that uses the network or containerd")
	return cmd
}

// checker prints one line per check and counts failures.
type checker struct {
	out      io.Writer
	checks   int
	failures int
}

func (c *checker) report(status, name, format string, args ...any) {
	c.checks++
	if status == "FAIL" {
		c.failures++
	}
	fmt.Fprintf(c.out, "%-4s  %-13s  %s\n", status, name, fmt.Sprintf(format, args...))
}

func (c *checker) ok(name, format string, args ...any)   { c.report("ok", name, format, args...) }
func (c *checker) warn(name, format string, args ...any) { c.report("warn", name, format, args...) }
func (c *checker) fail(name, format string, args ...any) { c.report("FAIL", name, format, args...) }

func runCheck(ctx context.Context, cfg config, out io.Writer, timeout time.Duration) error {
	c := &checker{out: out}
	us, tlsCfg, ok := checkConfig(c, cfg)
	device, token, enrolled := checkIdentity(c, cfg)
	applied := checkStateDir(c, cfg.StateDir)
	checkSigningKey(c, cfg)
	checkContainerd(ctx, c, cfg, timeout)
	switch {
	case !ok:
		c.fail("broker", "not checked: the broker settings are invalid")
	case token == "":
		checkReachable(ctx, c, us, tlsCfg, timeout, enrolled)
	default:
		checkBrokers(ctx, c, us, brokerCheck{
			// As the agent: with the device's client certificate.
			tls: enroll.WithClientCert(tlsCfg, cfg.StateDir), device: device, token: token,
			topics: schema.Topics{Prefix: cfg.TopicPrefix}, applied: applied, timeout: timeout,
		})
	}
	if c.failures > 0 {
		return fmt.Errorf("%d of %d checks failed", c.failures, c.checks)
	}
	fmt.Fprintf(out, "all %d checks passed\n", c.checks)
	return nil
}

// checkSigningKey says which hub signing key the agent will check
// desired states by: without one it runs nothing from the broker.
func checkSigningKey(c *checker, cfg config) {
	k, err := cfg.hubSigningKey()
	switch {
	case err != nil:
		c.fail("signing key", "%v", err)
	case k != nil:
		c.ok("signing key", "hub key %s (from --join or --hub-signing-key)", schema.SigningKeyID(k))
	default:
		p, err := trust.Load(cfg.StateDir)
		switch {
		case err != nil:
			c.fail("signing key", "%v", err)
		case p.Key() != nil:
			c.ok("signing key", "hub key %s pinned in %s", schema.SigningKeyID(p.Key()), filepath.Join(cfg.StateDir, trust.PinFile))
		case cfg.InsecureTrustFirstKey:
			c.warn("signing key", "none pinned: the agent pins the key of the first signed desired state (--insecure-trust-first-key); whoever publishes on its topic first owns it")
		default:
			c.fail("signing key", "none pinned: the agent runs nothing from the broker; start it with --join (the line fleet device add or fleet token create prints) or --hub-signing-key")
		}
	}
}

// checkConfig validates what the agent would refuse at start.
func checkConfig(c *checker, cfg config) ([]*url.URL, *tls.Config, bool) {
	var problems []string
	us, err := cfg.brokerURLs()
	if err != nil {
		problems = append(problems, err.Error())
	}
	tlsCfg, err := checkTLS(cfg)
	if err != nil {
		problems = append(problems, err.Error())
	}
	if _, err := cfg.releasePages(); err != nil {
		problems = append(problems, err.Error())
	}
	if _, err := newLogger(cfg.LogLevel, io.Discard); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		c.fail("config", "%s", strings.Join(problems, "; "))
		return us, tlsCfg, us != nil && tlsCfg != nil
	}
	what := "broker " + string(cfg.Broker)
	if len(us) > 1 {
		what = fmt.Sprintf("%d brokers %s", len(us), strings.Join(redacted(us), ", "))
	}
	c.ok("config", "%s, topic prefix %s, containerd namespace %s", what, cfg.TopicPrefix, cfg.Namespace)
	return us, tlsCfg, true
}

// checkTLS is the agent's broker TLS configuration, except that a CA
// verified by --ca-hash is not saved: the check changes nothing.
func checkTLS(cfg config) (*tls.Config, error) {
	tlsCfg, trust, err := cfg.brokerTLS(nil)
	if err != nil {
		return nil, err
	}
	if trust == enroll.TrustCAHash {
		return enroll.PinCATLSConfig(&tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.brokerHost()}, cfg.CAHash, nil)
	}
	if tlsCfg == nil {
		// A plain broker: Dial ignores it.
		return &tls.Config{MinVersion: tls.VersionTLS12}, nil
	}
	return tlsCfg, nil
}

// checkIdentity finds the device's name and token as the agent would,
// without enrolling. enrolled is false for a device that has yet to.
func checkIdentity(c *checker, cfg config) (device, token string, enrolled bool) {
	if cfg.Token != "" || cfg.TokenFile != "" {
		tok, err := cfg.token()
		if err != nil {
			c.fail("identity", "device %s: %v", cfg.Device, err)
			return cfg.Device, "", true
		}
		from := "--token"
		if cfg.TokenFile != "" {
			from = cfg.TokenFile
			if fi, err := os.Stat(cfg.TokenFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
				c.warn("identity", "device %s, token from %s, which others can read (mode %04o): chmod 600 it", cfg.Device, from, fi.Mode().Perm())
				return cfg.Device, tok, true
			}
		}
		c.ok("identity", "device %s, token from %s", cfg.Device, from)
		return cfg.Device, tok, true
	}
	stored, err := enroll.Stored(cfg.StateDir)
	switch {
	case err == nil:
		if cfg.Device != "" && cfg.Device != stored.Device {
			c.fail("identity", "the state dir %s holds the token of device %q, enrolled earlier, not of --device %s", cfg.StateDir, stored.Device, cfg.Device)
			return stored.Device, "", true
		}
		c.ok("identity", "device %s, token saved at enrollment in %s", stored.Device, filepath.Join(cfg.StateDir, enroll.TokenFile))
		return stored.Device, stored.Token, true
	case !errors.Is(err, fs.ErrNotExist):
		c.fail("identity", "%v", err)
		return cfg.Device, "", true
	case !cfg.bootstrap():
		c.fail("identity", "device %s has no token: give --token-file, or a bootstrap token to enroll (the broker refuses a device without one)", cfg.Device)
		return cfg.Device, "", true
	}
	bt, err := cfg.bootstrapToken()
	if err == nil {
		_, err = schema.ParseBootstrapToken(bt)
	}
	if err != nil {
		c.fail("identity", "not enrolled yet, and the bootstrap token is unusable: %v", err)
		return cfg.Device, "", false
	}
	name := cfg.Device
	if name == "" {
		src, err := enroll.ParseNameSource(cfg.NameFrom)
		if err == nil {
			name, err = enroll.DeviceName(src, enroll.NameOptions{})
		}
		if err != nil {
			c.fail("identity", "not enrolled yet, and no device name: %v (set --device, or another --name-from)", err)
			return "", "", false
		}
	}
	c.warn("identity", "not enrolled yet: at start the agent enrolls as %s with the bootstrap token and saves its own token in %s", name, cfg.StateDir)
	return name, "", false
}

// checkStateDir checks the state directory can be written, as the agent
// does (a file, fsync, remove), and returns the generation the agent last
// applied (0 if none).
func checkStateDir(c *checker, dir string) int64 {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		c.warn("state dir", "%s does not exist yet: the agent creates it (0700) at start", dir)
		return 0
	case err != nil:
		c.fail("state dir", "%v", err)
		return 0
	case !fi.IsDir():
		c.fail("state dir", "%s is not a directory", dir)
		return 0
	}
	f, err := os.CreateTemp(dir, ".check-")
	if err == nil {
		_, err = f.WriteString("fleet-agent check\n")
		if err == nil {
			err = f.Sync()
		}
		f.Close()
		os.Remove(f.Name())
	}
	if err != nil {
		c.fail("state dir", "%s is not writable: %v (run the check as the agent's user)", dir, err)
		return 0
	}
	desired, agent, err := state.Inspect(dir)
	switch {
	case err != nil:
		c.warn("state dir", "%s writable, but %v: at start the agent moves a corrupt file aside and waits for the hub's desired state", dir, err)
	case desired == nil:
		c.ok("state dir", "%s writable; no desired state persisted yet", dir)
	case agent.AppliedGeneration == desired.Generation:
		c.ok("state dir", "%s writable; desired state generation %d persisted (%d pods) and applied", dir, desired.Generation, len(desired.Pods))
	default:
		c.ok("state dir", "%s writable; desired state generation %d persisted (%d pods), generation %d applied", dir, desired.Generation, len(desired.Pods), agent.AppliedGeneration)
	}
	return agent.AppliedGeneration
}

func checkContainerd(ctx context.Context, c *checker, cfg config, timeout time.Duration) {
	// gRPC would retry a missing socket until the timeout, and then say
	// only that.
	if fi, err := os.Stat(cfg.ContainerdSocket); err != nil {
		c.fail("containerd", "%v (is containerd installed and running? apt-get install -y containerd runc; systemctl status containerd)", err)
		return
	} else if fi.Mode().Type() != fs.ModeSocket {
		c.fail("containerd", "%s is not a socket", cfg.ContainerdSocket)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rt, err := containerd.New(ctx, containerd.Options{
		Socket: cfg.ContainerdSocket, Namespace: cfg.Namespace, Registry: cfg.Registry,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		hint := ""
		if strings.Contains(err.Error(), "permission denied") {
			hint = " (run the check as the agent runs, as root)"
		}
		c.fail("containerd", "%v%s", err, hint)
		return
	}
	defer rt.Close()
	v, err := rt.Client().Version(ctx)
	if err != nil {
		c.fail("containerd", "%s: version: %v", cfg.ContainerdSocket, err)
		return
	}
	list, err := rt.List(ctx)
	if err != nil {
		c.fail("containerd", "%s %s: list the containers of namespace %s: %v", cfg.ContainerdSocket, v.Version, cfg.Namespace, err)
		return
	}
	running := 0
	for _, ct := range list {
		if ct.State == runtime.StateRunning {
			running++
		}
	}
	c.ok("containerd", "%s: containerd %s; namespace %s has %d Fleet containers, %d running", cfg.ContainerdSocket, v.Version, cfg.Namespace, len(list), running)
}

// redacted is the URLs as they may be shown.
func redacted(us []*url.URL) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = u.Redacted()
	}
	return out
}

// checkReachable dials every broker without logging in, for a device
// that has no token yet: one that answers is enough.
func checkReachable(ctx context.Context, c *checker, us []*url.URL, tlsCfg *tls.Config, timeout time.Duration, enrolled bool) {
	if enrolled {
		c.fail("broker", "%s: not checked without a device token", strings.Join(redacted(us), ", "))
		return
	}
	errs := make([]error, len(us))
	reachable := 0
	for i, u := range us {
		dctx, cancel := context.WithTimeout(ctx, timeout)
		conn, err := mqttio.Dial(dctx, u, enroll.ForBroker(tlsCfg, u), timeout)
		cancel()
		if err == nil {
			conn.Close()
			reachable++
		}
		errs[i] = err
	}
	for i, u := range us {
		switch {
		case errs[i] == nil:
			c.ok("broker", "%s reachable (the login is checked once the device has its token)", u.Redacted())
		case reachable > 0:
			c.warn("broker", "%s: %v (another broker of the list answers)", u.Redacted(), errs[i])
		default:
			c.fail("broker", "%s: %v", u.Redacted(), errs[i])
		}
	}
}

type brokerCheck struct {
	url            *url.URL
	tls            *tls.Config
	device, token  string
	topics         schema.Topics
	applied        int64
	timeout        time.Duration
	retainedWithin time.Duration // how long to wait for the retained desired state
}

// checkBrokers logs in to every broker of the list, as checkBroker
// does, and says which accept the device: one is what the agent needs,
// so with a list a broker that refuses or is down is a warning while
// another accepts (a standby hub's broker refuses devices on purpose:
// CONNACK "server unavailable"), and a failure when none does. The
// desired state is read from the first that accepts.
func checkBrokers(ctx context.Context, c *checker, us []*url.URL, b brokerCheck) {
	if len(us) == 1 {
		b.url = us[0]
		b.tls = enroll.ForBroker(b.tls, us[0])
		checkBroker(ctx, c, b)
		return
	}
	type result struct {
		client mqtt.Client
		took   time.Duration
		err    error
	}
	results := make([]result, len(us))
	var accepted []string
	for i, u := range us {
		bb := b
		bb.url, bb.tls = u, enroll.ForBroker(b.tls, u)
		cl, took, err := login(ctx, bb)
		results[i] = result{cl, took, err}
		if err == nil {
			accepted = append(accepted, u.Redacted())
		}
	}
	first := -1
	for i, u := range us {
		r := results[i]
		switch {
		case r.err == nil:
			c.ok("broker", "%s: logged in as %s in %s", u.Redacted(), b.device, r.took.Round(time.Millisecond))
			if first < 0 {
				first = i
			} else {
				r.client.Disconnect(100)
			}
		case errors.Is(r.err, packets.ErrorRefusedServerUnavailable):
			msg := "%s: refused the device: server unavailable (a standby hub's broker does so; the agent moves on to the next broker)"
			if len(accepted) > 0 {
				c.ok("broker", msg, u.Redacted())
			} else {
				c.fail("broker", msg, u.Redacted())
			}
		case len(accepted) > 0:
			c.warn("broker", "%s as %s: %s (the agent uses another broker of the list)", u.Redacted(), b.device, loginError(r.err, b.device))
		default:
			c.fail("broker", "%s as %s: %s", u.Redacted(), b.device, loginError(r.err, b.device))
		}
	}
	if first < 0 {
		c.fail("broker list", "none of the %d brokers accepts device %s: the agent keeps trying them in turn", len(us), b.device)
		c.fail("desired state", "not checked: no connection to a broker")
		return
	}
	c.ok("broker list", "%d of %d brokers accept device %s (%s): the agent connects to the first that accepts it", len(accepted), len(us), b.device, strings.Join(accepted, ", "))
	defer results[first].client.Disconnect(100)
	b.url = us[first]
	checkDesiredOn(ctx, c, results[first].client, b)
}

// loginError is err with a hint for a refused token.
func loginError(err error, device string) string {
	if errors.Is(err, packets.ErrorRefusedServerUnavailable) {
		return fmt.Sprintf("%v (a standby hub's broker refuses devices: give the agent every hub's broker, --broker ssl://h1:8883,ssl://h2:8883)", err)
	}
	if mqttio.IsNotAuthorized(err) {
		return fmt.Sprintf("%v (the token is not device %s's: a rotated token stops working at once; fleet device rotate-token %s issues a new one)", err, device, device)
	}
	return err.Error()
}

// checkBroker logs in as the device under a client ID of its own (a
// running agent keeps its session), subscribes to the desired topic and
// reads what is retained there. It publishes nothing and sets no will.
func checkBroker(ctx context.Context, c *checker, b brokerCheck) {
	client, took, err := login(ctx, b)
	if err != nil {
		c.fail("broker", "%s as %s: %s", b.url.Redacted(), b.device, loginError(err, b.device))
		c.fail("desired state", "not checked: no connection to the broker")
		return
	}
	defer client.Disconnect(100)
	c.ok("broker", "%s: logged in as %s in %s", b.url.Redacted(), b.device, took.Round(time.Millisecond))
	checkDesiredOn(ctx, c, client, b)
}

// login connects to b.url as the device, under a client ID of its own.
// It subscribes to nothing: checkDesiredOn does.
func login(ctx context.Context, b brokerCheck) (mqtt.Client, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	// A client ID of the device's own shape (NAME-16 hex digits: the
	// embedded broker takes no other from a device), random, so the
	// check never takes over the agent's session.
	suffix := make([]byte, 8)
	_, _ = rand.Read(suffix)
	dial := func() (net.Conn, error) { return mqttio.Dial(ctx, b.url, b.tls, b.timeout) }
	opts := mqttio.ClientOptions(b.url.String(), b.device+"-"+hex.EncodeToString(suffix), b.device, b.token, b.timeout, dial).
		SetDefaultPublishHandler(func(mqtt.Client, mqtt.Message) {})
	client := mqtt.NewClient(opts)
	start := time.Now()
	if err := mqttio.WaitToken(ctx, client.Connect()); err != nil {
		return nil, 0, err
	}
	return client, time.Since(start), nil
}

// checkDesiredOn subscribes to the device's desired topic on client and
// reads what is retained there.
func checkDesiredOn(ctx context.Context, c *checker, client mqtt.Client, b brokerCheck) {
	if b.retainedWithin <= 0 {
		b.retainedWithin = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	topic := b.topics.Device(b.device, schema.TopicDesired)
	desired := make(chan []byte, 1)
	sub := client.Subscribe(topic, 1, func(_ mqtt.Client, m mqtt.Message) {
		if m.Topic() == topic {
			select {
			case desired <- append([]byte(nil), m.Payload()...):
			default:
			}
		}
	})
	if err := mqttio.WaitToken(ctx, sub); err != nil {
		c.fail("desired state", "subscribe to %s: %v", topic, err)
		return
	}
	if st, ok := sub.(*mqtt.SubscribeToken); ok && st.Result()[topic] == 0x80 {
		c.fail("desired state", "the broker refused the subscription to %s (does --topic-prefix match the hub's, and the broker's ACL the device's name?)", topic)
		return
	}
	select {
	case payload := <-desired:
		checkDesired(c, topic, payload, b.device, b.applied)
	case <-time.After(b.retainedWithin):
		c.warn("desired state", "nothing retained on %s after %s: the hub has not published this device's desired state (is it registered with fleet device add, and the hub's topic prefix %s?)", topic, b.retainedWithin, b.topics.Prefix)
	case <-ctx.Done():
		c.fail("desired state", "%s: %v", topic, ctx.Err())
	}
}

func checkDesired(c *checker, topic string, payload []byte, device string, applied int64) {
	if len(payload) == 0 {
		c.warn("desired state", "%s is cleared: the device was deleted from the hub", topic)
		return
	}
	var ds schema.DesiredState
	if err := json.Unmarshal(payload, &ds); err != nil {
		c.fail("desired state", "%s: undecodable: %v", topic, err)
		return
	}
	if err := schema.ValidateDesiredState(&ds); err != nil || ds.Device != device {
		if err == nil {
			err = fmt.Errorf("it names device %q", ds.Device)
		}
		c.fail("desired state", "%s: invalid: %v", topic, err)
		return
	}
	msg := fmt.Sprintf("%s: generation %d, %d pods", topic, ds.Generation, len(ds.Pods))
	switch {
	case applied == ds.Generation:
		msg += "; the agent has applied it"
	case applied > 0:
		msg += fmt.Sprintf("; the agent last applied generation %d", applied)
	}
	c.ok("desired state", "%s", msg)
}
