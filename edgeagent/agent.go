package edgeagent

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleet/edgeagent/backoff"
	"github.com/fleetmq/fleet/edgeagent/clock"
	"github.com/fleetmq/fleet/edgeagent/desired"
	"github.com/fleetmq/fleet/edgeagent/devicekey"
	"github.com/fleetmq/fleet/edgeagent/enroll"
	"github.com/fleetmq/fleet/edgeagent/podconfig"
	"github.com/fleetmq/fleet/edgeagent/reconcile"
	"github.com/fleetmq/fleet/edgeagent/remote"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/session"
	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/edgeagent/status"
	"github.com/fleetmq/fleet/edgeagent/trust"
	"github.com/fleetmq/fleet/schema"
)

// DefaultStateDir is where the agent keeps its state unless told otherwise.
const DefaultStateDir = "/var/lib/fleet-agent"

// Options configures an Agent. Device and Runtime are required; every
// other zero value means the documented default.
type Options struct {
	// Device is this device's name (also the MQTT username).
	Device string
	// Broker is the MQTT broker URL (tcp://host:1883, ssl://host:8883).
	// Empty (and no Brokers) runs the agent without any network: it
	// applies the persisted desired state only.
	Broker string
	// Brokers, if set, are several broker URLs, the preferred first, and
	// Broker is ignored: the agent connects to the first that accepts it
	// and, when the connection is lost or refused, moves to the next,
	// round-robin, with ReconnectBackoff (session.Options.Brokers).
	Brokers []string
	// Token is the device's MQTT password.
	Token string
	// TLSConfig is used for ssl://, tls:// and mqtts:// brokers: for
	// every broker of Brokers, each verified for its own name.
	TLSConfig *tls.Config
	// CAFile is the broker CA file the agent was given (--ca-file), if
	// any: reported in status (trustedCAs) until the hub sends a CA
	// bundle (enroll.CABundleFile). Default none.
	CAFile string
	// Topics sets the topic prefix (default fleet/v1).
	Topics schema.Topics
	// StateDir holds the persisted state and container logs (default
	// DefaultStateDir).
	StateDir string
	// Runtime runs the containers: runtime/containerd in production,
	// *runtime.Fake in tests.
	Runtime runtime.Runtime
	// Logger receives the agent's logs; it is given a "device" attribute.
	Logger *slog.Logger
	// Clock is the agent's time (default the real clock).
	Clock clock.Clock
	// Version is reported in status (agent.version).
	Version string

	// ResyncInterval is the period of full reconciles (default 30 s).
	ResyncInterval time.Duration
	// StatusInterval is the least time between status publishes
	// (default 1 s); HeartbeatInterval republishes an unchanged status
	// at most this long after the last publish (default 0: never, an idle
	// device sends only its MQTT keepalive; each wait is drawn from its
	// last fifth, see status.ReporterOptions).
	StatusInterval    time.Duration
	HeartbeatInterval time.Duration
	// KeepAlive is the MQTT keepalive (default session.DefaultKeepAlive).
	KeepAlive time.Duration
	// StatusSettleGrace is how long a status showing work in progress is
	// held back in case the work finishes first (default DefaultStatusSettleGrace, 1 s; negative:
	// publish it at once). See status.ReporterOptions.SettleGrace.
	StatusSettleGrace time.Duration
	// CrashLoop is the restart backoff (default 10 s doubling to 5 min,
	// reset after 10 min running).
	CrashLoop reconcile.CrashLoop
	// Location is the device's time zone for update windows with
	// timeZone device (default time.Local, from TZ or /etc/localtime);
	// the agent reports its name in status.agent.timeZone.
	Location *time.Location
	// SteadyAfter is how long a container must run without exiting for
	// its start to count (default reconcile.DefaultSteadyAfter, 30 s). A
	// new revision of a pod whose container fails to start
	// reconcile.FailedStartLimit times (3) before that is given up for
	// the pod's last steady revision.
	SteadyAfter time.Duration
	// ImageGCMinFree is the free-space floor of the filesystem holding
	// the images (flag --image-gc-min-free): below it the agent also
	// deletes the images it keeps for a fast undo, oldest first (default
	// reconcile.DefaultDiskFloor, 10 %; reconcile.ParseDiskFloor reads
	// the flag; DiskFloor{Off: true} disables the floor). Images the
	// agent pulled and nothing needs are deleted whatever the floor.
	ImageGCMinFree reconcile.DiskFloor
	// RetryBackoff follows failures to pull, create or start (default
	// 5 s doubling to 5 min, jittered).
	RetryBackoff backoff.Policy
	// ReconnectBackoff is the MQTT reconnect backoff (default
	// session.DefaultBackoff: 250 ms growing 1.5 times to 60 s, full
	// jitter).
	ReconnectBackoff backoff.Policy
	// StopTimeout is the grace period of a container being removed
	// (default 10 s).
	StopTimeout time.Duration
	// MaxParallel bounds the pods worked on at once (default 4).
	MaxParallel int
	// NodeInfo returns the node facts for status (default: read /proc and
	// statfs the state dir). Hollow agents pass a cheap constant.
	NodeInfo func() *schema.NodeInfo
	// Seed feeds the jitters (0: random).
	Seed uint64
	// LogIndexInterval is how often the agent samples its containers' log
	// files to date their lines for `fleet logs --since/--timestamps`
	// (default 5 s; negative disables it: lines are then dated by their
	// file's modification time). The scale suite's hollow agents, which
	// write no logs, turn it off.
	LogIndexInterval time.Duration
	// DeviceKey is the device's own key pair: its public half is reported
	// in every status (publicKey), and the hub seals the values of the
	// Secrets the device's pods use to it. Default: the key in StateDir
	// (devicekey.LoadOrCreate: made at the first start). A key file that
	// cannot be read leaves the agent running without a key: pods that
	// need a Secret wait, and status says why.
	DeviceKey *devicekey.Key
	// HubSigningKey, if set, is pinned as the hub's signing key at start
	// (flags --join, --hub-signing-key), replacing any key pinned in
	// StateDir. Otherwise the key pinned in StateDir (trust.PinFile: from
	// an earlier start or the enrollment answer) is used. With a key
	// pinned, unsigned, badly signed, other devices' and replayed desired
	// states are refused; with none, every desired state from the broker
	// is (desired.NoPin), unless InsecureTrustFirstKey.
	HubSigningKey ed25519.PublicKey
	// InsecureTrustFirstKey: with no key pinned, accept unsigned states
	// and pin the key of the first signed one (trust on first use; flag
	// --insecure-trust-first-key). Default false.
	InsecureTrustFirstKey bool
	// Upgrade follows desiredState.agent, the agent's own release
	// (edgeagent/selfupdate): it is handed the agent the persisted desired
	// state names at start and that of every accepted one, and its Status
	// is reported as status.agent.upgrade. Default none: the field is
	// ignored.
	Upgrade Upgrader
	// Trial, set in an agent started in a trial by the previous one, is
	// told when the first pass over the containers is done, when the
	// broker session is up and when a status was published. Default none.
	Trial TrialHooks
}

// Upgrader follows the agent release the desired state names.
type Upgrader interface {
	Desired(*schema.DesiredAgent)
	Status() *schema.AgentUpgradeStatus
}

// TrialHooks hear how far an agent in trial got.
type TrialHooks interface {
	Adopted()
	Connected()
	Reported()
}

// ReplayGrace is how long after accepting a desired state an older one
// from the same store counts as overtaken on the way rather than
// replayed: desired.ReplayGrace, where the rule lives.
const ReplayGrace = desired.ReplayGrace

// Stats counts what the agent did with desired-state payloads.
type Stats struct {
	Accepted, Duplicate, Stale, OtherDevice, Invalid, Cleared int64
	// Unsigned and BadSignature count states refused for their
	// signature; Replayed the stale states refused as replays (they are
	// counted in Stale too).
	Unsigned, BadSignature, Replayed int64
}

// Agent is one device's agent.
type Agent struct {
	o      Options
	log    *slog.Logger
	topics struct{ status, events string }

	// admission judges desired-state payloads; made by Run, from the
	// persisted state.
	admission *desired.Admission
	reporter  *status.Reporter
	events    *status.Events
	session   *session.Session // nil without a broker
	remote    *remote.Server   // nil without a broker

	counts struct {
		accepted, duplicate, stale, other, invalid, cleared atomic.Int64
		unsigned, badSignature, replayed                    atomic.Int64
	}

	pin *trust.Pin // the hub's pinned signing key

	key    *devicekey.Key // nil when unusable (keyErr)
	keyErr error

	// mu guards last, the reconciler's latest status; the admission
	// keeps the refusal status shows under its own lock.
	mu   sync.Mutex
	last reconcile.Status

	// trustedCAs are the CA pins status reports (enroll.TrustedCAs).
	trustedCAs atomic.Pointer[[]string]
	// certs renews the client certificate over the session (certrenew.go).
	certs certRenewal
	// admitted is set once Run made the admission: status can be built.
	admitted atomic.Bool
}

// DefaultStatusSettleGrace is Options.StatusSettleGrace's default: a
// container that starts within it is reported once, running. A second
// covers containerd's create and start on a slow device (a Pi Zero) and on
// a loaded one, where a shorter grace adds a "Pending" status to every
// change: a message more for the hub and the cellular link (issue 31).
const DefaultStatusSettleGrace = time.Second

// New checks the options and returns an Agent; Run starts it.
func New(o Options) (*Agent, error) {
	if err := schema.ValidateName(o.Device); err != nil {
		return nil, fmt.Errorf("edgeagent: device name: %w", err)
	}
	if o.Runtime == nil {
		return nil, errors.New("edgeagent: a Runtime is required")
	}
	o.ensureDefaults()
	a := &Agent{o: o, log: o.Logger.With("device", o.Device), key: o.DeviceKey}
	a.certs.a = a
	if a.key == nil {
		a.key, a.keyErr = devicekey.LoadOrCreate(o.StateDir)
		if a.keyErr != nil {
			a.log.Error("device key unusable: Secrets sent to this device cannot be unsealed", "err", a.keyErr)
		}
	}
	if err := a.loadPin(); err != nil {
		return nil, err
	}
	a.topics.status = o.Topics.Device(o.Device, schema.TopicStatus)
	a.topics.events = o.Topics.Device(o.Device, schema.TopicEvents)

	var pub status.Publisher = offlinePublisher{}
	if o.Broker != "" || len(o.Brokers) > 0 {
		if err := a.connect(); err != nil {
			return nil, err
		}
		pub = a.session
	}
	a.events = status.NewEvents(status.EventsOptions{
		Device: o.Device, Topic: a.topics.events, Publisher: pub, Clock: o.Clock, Logger: a.log,
		CrashTopic: o.Topics.Device(o.Device, schema.TopicCrashReports),
		Batch:      true, Linger: status.DefaultEventLinger,
	})
	a.reporter = status.NewReporter(status.ReporterOptions{
		Device: o.Device, Topic: a.topics.status, Publisher: pub, Version: o.Version,
		NodeInfo: o.NodeInfo, StateDir: o.StateDir, Clock: o.Clock, Logger: a.log,
		MinInterval: o.StatusInterval, Heartbeat: o.HeartbeatInterval, SettleGrace: o.StatusSettleGrace,
		Seed: o.Seed, OnPublished: a.onPublished,
	})
	return a, nil
}

// ensureDefaults fills in the defaults New documents and the other parts
// do not apply themselves.
func (o *Options) ensureDefaults() {
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	switch {
	case o.StatusSettleGrace == 0:
		o.StatusSettleGrace = DefaultStatusSettleGrace
	case o.StatusSettleGrace < 0:
		o.StatusSettleGrace = 0
	}
}

// loadPin pins Options.HubSigningKey, if given, and loads the pinned key.
func (a *Agent) loadPin() error {
	if a.o.HubSigningKey != nil {
		if err := trust.Save(a.o.StateDir, a.o.HubSigningKey); err != nil {
			return fmt.Errorf("edgeagent: %w", err)
		}
	}
	pin, err := trust.Load(a.o.StateDir)
	if err != nil {
		return fmt.Errorf("edgeagent: %w (pass --join or --hub-signing-key to pin the hub's key again)", err)
	}
	a.pin = pin
	if k := pin.Key(); k != nil {
		a.log.Info("hub signing key pinned", "key", schema.SigningKeyID(k))
	}
	return nil
}

// connect makes the MQTT session and the server answering the hub's
// requests (logs, exec, top) over it.
func (a *Agent) connect() error {
	o := a.o
	dir, err := state.Open(o.StateDir)
	if err != nil {
		return fmt.Errorf("edgeagent: %w", err)
	}
	clientID, err := dir.ClientID(o.Device)
	if err != nil {
		return fmt.Errorf("edgeagent: %w", err)
	}
	so := session.Options{
		Broker:    o.Broker,
		Brokers:   o.Brokers,
		Device:    o.Device,
		ClientID:  clientID,
		Token:     o.Token,
		TLSConfig: o.TLSConfig,
		Topics:    o.Topics,
		Logger:    a.log,
		Clock:     o.Clock,
		Backoff:   o.ReconnectBackoff,
		KeepAlive: o.KeepAlive,
		Seed:      o.Seed,
		OnDesired: a.onDesired,
		OnRequest: a.onRequest,
		OnConnect: a.onConnect,
	}
	if o.TLSConfig != nil {
		// Mutual TLS: the client certificate is renewed over the session.
		so.OnCertificate = a.certs.onCertificate
		// An expired certificate is presented, and the broker admits
		// the device only to renew it (WithClientCert).
		so.RenewalOnly = func() bool { return enroll.ClientCertExpired(o.StateDir, time.Now()) }
		so.OnRenewalConnect = func() {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				a.certs.check(ctx, true)
			}()
		}
	}
	s, err := session.New(so)
	if err != nil {
		return fmt.Errorf("edgeagent: %w", err)
	}
	a.session = s
	a.remote, err = remote.New(remote.Options{
		Device:    o.Device,
		Topics:    o.Topics,
		Publisher: s,
		Runtime:   o.Runtime,
		Key:       a.pin.Key, // requests are verified with the pinned hub key
		LogPath:   dir.LogPath,
		Pods:      a.podContainers,
		Logger:    a.log.With("part", "remote"),
		StateDir:  o.StateDir,

		IndexInterval: o.LogIndexInterval,
	})
	if err != nil {
		return fmt.Errorf("edgeagent: %w", err)
	}
	return nil
}

type offlinePublisher struct{}

func (offlinePublisher) Publish(context.Context, string, bool, []byte) error {
	return session.ErrNotConnected
}

// Stats returns the desired-state counters.
func (a *Agent) Stats() Stats {
	return Stats{
		Accepted:    a.counts.accepted.Load(),
		Duplicate:   a.counts.duplicate.Load(),
		Stale:       a.counts.stale.Load(),
		OtherDevice: a.counts.other.Load(),
		Invalid:     a.counts.invalid.Load(),
		Cleared:     a.counts.cleared.Load(),

		Unsigned:     a.counts.unsigned.Load(),
		BadSignature: a.counts.badSignature.Load(),
		Replayed:     a.counts.replayed.Load(),
	}
}

// Connected reports whether the MQTT session is up.
func (a *Agent) Connected() bool { return a.session != nil && a.session.Connected() }

// Run loads the persisted state, reconciles from it before touching the
// network, then keeps the MQTT session, the reconcile loop and the status
// reporting running until ctx is done. Stopping never stops containers.
// It returns nil after a clean shutdown.
func (a *Agent) Run(ctx context.Context) error {
	dir, err := state.Open(a.o.StateDir)
	if err != nil {
		return fmt.Errorf("edgeagent: %w", err)
	}
	ds, err := dir.LoadDesired()
	if err != nil {
		a.log.Error("persisted desired state unusable; waiting for the hub", "err", err)
		a.events.Record(schema.EventWarning, "StateFileCorrupt", "", "", err.Error())
	}
	if ds != nil && ds.Device != a.o.Device {
		a.log.Error("persisted desired state is for another device; ignoring it", "for", ds.Device)
		ds = nil
	}
	ag, err := dir.LoadAgent()
	if err != nil {
		a.log.Error("persisted agent state unusable; restart counts and backoff start afresh", "err", err)
		a.events.Record(schema.EventWarning, "StateFileCorrupt", "", "", err.Error())
	}
	if a.keyErr != nil {
		a.events.Record(schema.EventWarning, "DeviceKeyUnusable", "", "", a.keyErr.Error())
	}
	if ds != nil {
		a.log.Info("loaded persisted desired state", "generation", ds.Generation, "store", ds.Store, "pods", len(ds.Pods))
		if a.o.Upgrade != nil {
			a.o.Upgrade.Desired(ds.Agent)
		}
	}
	a.admission = desired.NewAdmission(desired.AdmissionOptions{
		Device: a.o.Device, Current: ds, Pin: a.pin, Clock: a.o.Clock, Logger: a.log,
		InsecureTrustFirstKey: a.o.InsecureTrustFirstKey,
	})
	a.admitted.Store(true)

	rec, err := reconcile.New(reconcile.Options{
		Runtime:        a.o.Runtime,
		State:          dir,
		Inbox:          a.admission.Inbox(),
		Desired:        ds,
		Agent:          ag,
		Clock:          a.o.Clock,
		Logger:         a.log,
		Events:         a.events,
		OnStatus:       a.onStatus,
		ResyncInterval: a.o.ResyncInterval,
		CrashLoop:      a.o.CrashLoop,
		SteadyAfter:    a.o.SteadyAfter,
		Location:       a.o.Location,
		ImageGCMinFree: a.o.ImageGCMinFree,
		Retry:          a.o.RetryBackoff,
		StopTimeout:    a.o.StopTimeout,
		MaxParallel:    a.o.MaxParallel,
		Seed:           a.o.Seed,
		DeviceKey:      a.unsealer(),
	})
	if err != nil {
		return fmt.Errorf("edgeagent: %w", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var recErr error
	wg.Go(func() {
		if err := rec.Run(ctx); err != nil {
			recErr = err
			cancel()
		}
	})
	// The first pass runs from the persisted state, before any network.
	select {
	case <-rec.Ready():
		if a.o.Trial != nil {
			a.o.Trial.Adopted()
		}
	case <-ctx.Done():
	}
	wg.Go(func() { _ = a.reporter.Run(ctx) })
	wg.Go(func() { _ = a.events.Run(ctx) })
	if a.session != nil {
		wg.Go(func() { _ = a.remote.Run(ctx) })
		wg.Go(func() { _ = a.session.Run(ctx) })
		if a.o.TLSConfig != nil {
			wg.Go(func() { a.certs.run(ctx) })
		}
	} else {
		a.log.Info("no broker configured; running from persisted state only")
	}
	a.log.Info("agent started", "version", a.o.Version, "state_dir", a.o.StateDir, "brokers", a.brokers())
	wg.Wait()
	a.log.Info("agent stopped; containers left running")
	if recErr != nil {
		return fmt.Errorf("edgeagent: reconciler: %w", recErr)
	}
	return nil
}

// brokers are the broker URLs the agent uses, in order.
func (a *Agent) brokers() []string {
	if a.session == nil {
		return nil
	}
	return a.session.Brokers()
}

// Broker returns the URL of the broker the agent is connected to, ""
// while it is not.
func (a *Agent) Broker() string {
	if a.session == nil {
		return ""
	}
	return a.session.Broker()
}

// PublicKey is the device's public key as status reports it ("" without
// a usable key).
func (a *Agent) PublicKey() string {
	if a.key == nil {
		return ""
	}
	return a.key.PublicKey()
}

// unsealer is the key for the reconciler: a nil interface, not a nil
// *devicekey.Key, when there is none.
func (a *Agent) unsealer() podconfig.Key {
	if a.key == nil {
		return nil
	}
	return a.key
}

// onRequest hands a payload of the requests topic to the remote server;
// like onDesired it runs on a goroutine paho starts for the message.
func (a *Agent) onRequest(payload []byte) {
	if a.remote != nil {
		a.remote.Handle(payload)
	}
}

// podContainers returns the containers of each pod the agent last
// reported: those of its desired state.
func (a *Agent) podContainers() map[string][]string {
	a.mu.Lock()
	pods := a.last.Pods
	a.mu.Unlock()
	out := make(map[string][]string, len(pods))
	for _, p := range pods {
		names := make([]string, 0, len(p.Containers))
		for _, c := range p.Containers {
			names = append(names, c.Name)
		}
		out[p.Name] = names
	}
	return out
}

// onPublished hears that a status went out: for an agent in trial,
// reported once its session is up.
func (a *Agent) onPublished() {
	if a.o.Trial != nil && a.Connected() {
		a.o.Trial.Reported()
	}
}

// StatusChanged makes the agent report its status again (the agent's
// upgrade moved, say).
func (a *Agent) StatusChanged() {
	if a.admitted.Load() {
		a.pushStatus()
	}
}

func (a *Agent) onConnect() {
	if a.o.Trial != nil {
		a.o.Trial.Connected()
	}
	// The CA verified on a first contact by hash is saved during the
	// handshake: report it from this connection on.
	if cas := a.currentTrustedCAs(); !slices.Equal(cas, a.refreshTrustedCAs()) {
		a.pushStatus()
	}
	a.reporter.Republish()
	a.events.Flush()
	if a.o.TLSConfig != nil {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			a.certs.check(ctx, true)
		}()
	}
}

// onDesired runs on a goroutine paho starts for the message, off paho's
// router. Nothing is queued: the admission judges each payload as it
// arrives (signature, order, pin, refusal: desired.Admission), and the
// inbox, the agent's one slot for desired state, keeps only the newest
// accepted state for the reconcile loop, which does the work. Here the
// verdict fans out: counted, raised as an event, shown in status.
func (a *Agent) onDesired(payload []byte) {
	v := a.admission.Admit(payload)
	a.count(v.Outcome)
	if v.Event != nil {
		a.events.RecordEvent(*v.Event)
	}
	if v.Outcome == desired.Accepted && a.saveCABundle(v.State) {
		v.StatusChanged = true
	}
	if v.Outcome == desired.Accepted && a.o.Upgrade != nil {
		a.o.Upgrade.Desired(v.State.Agent)
	}
	if v.StatusChanged {
		a.pushStatus()
	}
}

// saveCABundle keeps the CA bundle of an accepted desired state
// (enroll.CABundleFile), the broker's trust from the next connection on,
// and reports whether the CAs the agent trusts changed.
func (a *Agent) saveCABundle(ds *schema.DesiredState) bool {
	if ds == nil || ds.CABundle == "" {
		return false
	}
	changed, err := enroll.SaveCABundle(a.o.StateDir, []byte(ds.CABundle))
	if err != nil {
		a.log.Warn("the desired state's CA bundle is unusable; keeping the CAs trusted so far", "generation", ds.Generation, "err", err)
		a.events.Record(schema.EventWarning, "HubCABundleUnusable", "", "", err.Error())
		return false
	}
	if !changed {
		return false
	}
	cas := a.refreshTrustedCAs()
	msg := "the hub's CA bundle changed: trusting " + strings.Join(cas, ", ") + " from the next connection on"
	a.log.Info(msg, "generation", ds.Generation)
	a.events.Record(schema.EventNormal, "HubCABundleUpdated", "", "", msg)
	return true
}

// refreshTrustedCAs reads the CAs the agent trusts again.
func (a *Agent) refreshTrustedCAs() []string {
	cas := enroll.TrustedCAs(a.o.StateDir, a.o.CAFile)
	a.trustedCAs.Store(&cas)
	return cas
}

// count adds an admission's outcome to Stats.
func (a *Agent) count(o desired.Outcome) {
	c := &a.counts
	switch o {
	case desired.Accepted:
		c.accepted.Add(1)
	case desired.Duplicate:
		c.duplicate.Add(1)
	case desired.Stale:
		c.stale.Add(1)
	case desired.Replayed:
		c.stale.Add(1)
		c.replayed.Add(1)
	case desired.OtherDevice:
		c.other.Add(1)
	case desired.Invalid:
		c.invalid.Add(1)
	case desired.Cleared:
		c.cleared.Add(1)
	case desired.Unsigned:
		c.unsigned.Add(1)
	case desired.BadSignature:
		c.badSignature.Add(1)
	}
}

func (a *Agent) onStatus(st reconcile.Status) {
	a.mu.Lock()
	a.last = st
	a.mu.Unlock()
	a.pushStatus()
}

// currentTrustedCAs are the CA pins status reports.
func (a *Agent) currentTrustedCAs() []string {
	if p := a.trustedCAs.Load(); p != nil {
		return *p
	}
	return a.refreshTrustedCAs()
}

func (a *Agent) pushStatus() {
	a.mu.Lock()
	st := a.last
	a.mu.Unlock()
	refused := a.admission.Refusal()
	var msgs []string
	var keyMsg string
	if a.keyErr != nil {
		keyMsg = "device key unusable (Secrets cannot be unsealed): " + a.keyErr.Error()
	}
	for _, m := range []string{st.Message, refused, keyMsg} {
		if m != "" {
			msgs = append(msgs, m)
		}
	}
	pods := st.Pods
	if pods == nil {
		pods = []schema.PodStatus{}
	}
	var upgrade *schema.AgentUpgradeStatus
	if a.o.Upgrade != nil {
		upgrade = a.o.Upgrade.Status()
	}
	a.reporter.Update(schema.DeviceStatus{
		Agent:              schema.AgentInfo{Upgrade: upgrade},
		ObservedGeneration: st.ObservedGeneration,
		Store:              st.Store,
		PublicKey:          a.PublicKey(),
		Pods:               pods,
		Message:            strings.Join(msgs, "; "),
		TrustedCAs:         a.currentTrustedCAs(),
	})
}
