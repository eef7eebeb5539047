// Package status publishes what the agent observes: the retained
// DeviceStatus (intermediate states coalesced, at most one per interval;
// settled states at once; node figures when they move materially; an
// optional heartbeat) and rate-limited events.
//
// A device whose state does not change sends nothing: its presence is
// its MQTT session (keepalive and last will), so an idle device costs its
// cellular plan only the keepalive (BENCHMARKS.md, "Bytes on the wire").
package status

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"math/rand/v2"
	goruntime "runtime"
	"sync"
	"time"

	"github.com/fleetmq/fleet/edgeagent/clock"
	"github.com/fleetmq/fleet/edgeagent/wake"
	"github.com/fleetmq/fleet/schema"
)

// Publisher sends one MQTT message at QoS 1. It must return within the
// context's deadline; it fails while the session is disconnected.
type Publisher interface {
	Publish(ctx context.Context, topic string, retained bool, payload []byte) error
}

// ReporterOptions configures a Reporter.
type ReporterOptions struct {
	Device    string
	Topic     string // the device's status topic
	Publisher Publisher
	Version   string
	// NodeInfo returns the node facts sent with each status (default
	// ReadNodeInfo of StateDir).
	NodeInfo func() *schema.NodeInfo
	StateDir string
	Clock    clock.Clock
	Logger   *slog.Logger
	// MinInterval is the least time between two publishes (default 1 s):
	// changes within it are coalesced into one status. A settled status
	// (see Settled) that ends work in progress or reports a new
	// observedGeneration is published at once instead.
	MinInterval time.Duration
	// SettleGrace holds back an intermediate status that follows a settled
	// one for up to this long (0: not at all): work that settles within it
	// (a container that starts in 70 ms) is reported by one status, the
	// settled one, instead of a "Pending" status and then the settled one.
	// Work that takes longer shows as intermediate after SettleGrace.
	SettleGrace time.Duration
	// Heartbeat republishes an unchanged status at most this long after
	// the last publish (0, the default: never). Only for a hub run with
	// --stale-after, against a broker that may lose last wills.
	Heartbeat time.Duration
	// NodeCheck is how often the node figures are read and compared with
	// those last sent (default 5 min; negative: never). A status goes out
	// when they moved materially (NodeMoved), not on every change of
	// free memory.
	NodeCheck time.Duration
	// HeartbeatJitter draws each heartbeat's wait uniformly from
	// [(1-HeartbeatJitter)·Heartbeat, Heartbeat] (default 0.2; negative:
	// exactly Heartbeat). Every agent publishes at once after a fleet-wide
	// change or a hub restart; without jitter their heartbeats would stay
	// in step ever after, a burst of the whole fleet every 30 s.
	HeartbeatJitter float64
	// Seed feeds the jitter (0: random).
	Seed uint64
	// PublishTimeout bounds one publish (default 10 s).
	PublishTimeout time.Duration
	// OnPublished, if set, is called after each status the publisher
	// took (an agent in trial tells its parent it reported).
	OnPublished func()
}

// Reporter publishes the device status. Update never blocks; Run does the
// publishing.
type Reporter struct {
	o    ReporterOptions
	kick chan struct{}
	rnd  *rand.Rand // Run's only

	mu     sync.Mutex
	latest schema.DeviceStatus
	have   bool
	force  bool
}

// NewReporter returns a Reporter.
func NewReporter(o ReporterOptions) *Reporter {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MinInterval <= 0 {
		o.MinInterval = time.Second
	}
	if o.Heartbeat < 0 {
		o.Heartbeat = 0
	}
	if o.NodeCheck == 0 {
		o.NodeCheck = 5 * time.Minute
	}
	switch {
	case o.HeartbeatJitter == 0:
		o.HeartbeatJitter = 0.2
	case o.HeartbeatJitter < 0:
		o.HeartbeatJitter = 0
	case o.HeartbeatJitter > 1:
		o.HeartbeatJitter = 1
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	if o.PublishTimeout <= 0 {
		o.PublishTimeout = 10 * time.Second
	}
	if o.NodeInfo == nil {
		dir := o.StateDir
		o.NodeInfo = func() *schema.NodeInfo { return ReadNodeInfo(dir) }
	}
	return &Reporter{o: o, kick: wake.New(), rnd: rand.New(rand.NewPCG(o.Seed, 0x5eed))}
}

// resetHeartbeat arms the heartbeat timer, if there is a heartbeat.
func (r *Reporter) resetHeartbeat(t clock.Timer) {
	if r.o.Heartbeat > 0 {
		t.Reset(r.nextHeartbeat())
	}
}

// NodeMoved reports whether the node figures moved enough since they
// were last sent to be worth a status: another host name or size, a
// reboot, free memory moved by a tenth of the total, free disk by a
// twentieth, the temperature by 5 °C (or it appeared or went). Uptime
// alone never is (the hub ages it from the status time).
func NodeMoved(sent, now *schema.NodeInfo) bool {
	switch {
	case sent == nil || now == nil:
		return sent != now
	case sent.Hostname != now.Hostname, sent.MemoryTotalBytes != now.MemoryTotalBytes, sent.DiskTotalBytes != now.DiskTotalBytes:
		return true
	case now.UptimeSeconds < sent.UptimeSeconds:
		return true
	}
	return absDiff(sent.MemoryAvailBytes, now.MemoryAvailBytes) >= now.MemoryTotalBytes/10 && now.MemoryTotalBytes > 0 ||
		absDiff(sent.DiskFreeBytes, now.DiskFreeBytes) >= now.DiskTotalBytes/20 && now.DiskTotalBytes > 0 ||
		temperatureMoved(sent.TemperatureCelsius, now.TemperatureCelsius)
}

// temperatureMoved: a temperature appeared, went, or moved by 5 °C.
func temperatureMoved(sent, now *float64) bool {
	if sent == nil || now == nil {
		return (sent == nil) != (now == nil)
	}
	return math.Abs(*sent-*now) >= 5
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}

// nextHeartbeat draws the wait before the next heartbeat.
func (r *Reporter) nextHeartbeat() time.Duration {
	span := time.Duration(r.o.HeartbeatJitter * float64(r.o.Heartbeat))
	if span <= 0 {
		return r.o.Heartbeat
	}
	return r.o.Heartbeat - time.Duration(r.rnd.Int64N(int64(span)+1))
}

// Update sets the status to publish. Device, Time, Agent and Node are
// filled in by the Reporter.
func (r *Reporter) Update(st schema.DeviceStatus) {
	r.mu.Lock()
	r.latest, r.have = st, true
	r.mu.Unlock()
	wake.Signal(r.kick)
}

// Republish forces the next publish even if nothing changed (after a
// reconnect: the broker's retained copy may be stale).
func (r *Reporter) Republish() {
	r.mu.Lock()
	r.force = true
	r.mu.Unlock()
	wake.Signal(r.kick)
}

// Settled reports whether a status shows no work in progress: every pod
// is ready or has reached a terminal phase (Succeeded, Failed). Pending,
// Unknown and running-but-not-ready (restarting) pods are intermediate.
func Settled(st *schema.DeviceStatus) bool {
	for i := range st.Pods {
		p := &st.Pods[i]
		switch {
		case p.Phase == schema.PhaseRunning && p.Ready:
		case p.Phase == schema.PhaseSucceeded, p.Phase == schema.PhaseFailed:
		default:
			return false
		}
	}
	return true
}

// Run publishes until ctx is done.
func (r *Reporter) Run(ctx context.Context) error {
	l := r.newReportLoop()
	defer l.stop()
	for {
		if !l.wake(ctx) {
			return nil
		}
		st, have := r.snapshot()
		settled := have && Settled(&st)
		if l.holdBack(&st, have, settled) {
			continue
		}
		force := r.takeForce()
		if !have {
			r.resetHeartbeat(l.heartbeat)
			continue
		}
		key, payload, ok := l.encode(&st, force)
		if !ok {
			continue
		}
		if !l.publish(ctx, &st, key, payload, settled) {
			return nil
		}
	}
}

// snapshot returns the latest status Update set, and whether there is one.
func (r *Reporter) snapshot() (schema.DeviceStatus, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.latest, r.have
}

// setForce makes the next publish go out even if nothing changed.
func (r *Reporter) setForce() {
	r.mu.Lock()
	r.force = true
	r.mu.Unlock()
}

// takeForce reports and clears a forced publish.
func (r *Reporter) takeForce() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	force := r.force
	r.force = false
	return force
}

// reportLoop is what Run remembers between two wake-ups: what it last
// attempted and sent, and its timers.
type reportLoop struct {
	r           *Reporter
	sent        []byte // the last published status without time and node facts
	sentNode    *schema.NodeInfo
	lastAttempt time.Time
	// What the last attempted publish said: a settled status is urgent
	// (skips MinInterval) only if it ends an intermediate state or moves
	// observedGeneration, so the rate stays bounded by the intermediate
	// publishes (one per interval) and the hub's desired-state changes.
	attempted, attemptedSettled bool
	attemptedGen                int64

	heartbeat, nodeCheck, hold clock.Timer
	holding                    bool // hold runs: it publishes the latest when it fires
	graced                     bool // the intermediate status being held had its grace
}

// newReportLoop starts the heartbeat and node check timers; hold starts
// stopped.
func (r *Reporter) newReportLoop() *reportLoop {
	l := &reportLoop{r: r}
	l.heartbeat = r.o.Clock.NewTimer(time.Hour)
	l.heartbeat.Stop()
	r.resetHeartbeat(l.heartbeat)
	l.nodeCheck = r.o.Clock.NewTimer(time.Hour)
	l.nodeCheck.Stop()
	if r.o.NodeCheck > 0 {
		l.nodeCheck.Reset(r.o.NodeCheck)
	}
	l.hold = r.o.Clock.NewTimer(time.Hour)
	l.hold.Stop()
	return l
}

func (l *reportLoop) stop() {
	l.hold.Stop()
	l.nodeCheck.Stop()
	l.heartbeat.Stop()
}

// wake waits for a reason to look at the status: an Update or Republish,
// the heartbeat (which forces a publish), node figures that moved since
// they were sent (likewise), or the end of a hold. It returns false once
// ctx is done.
func (l *reportLoop) wake(ctx context.Context) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-l.r.kick:
		case <-l.heartbeat.C():
			l.r.setForce()
		case <-l.nodeCheck.C():
			l.nodeCheck.Reset(l.r.o.NodeCheck)
			if l.sentNode == nil || !NodeMoved(l.sentNode, l.r.o.NodeInfo()) {
				continue
			}
			l.r.setForce()
		case <-l.hold.C():
			l.holding = false
		}
		return true
	}
}

// holdBack reports whether st waits rather than goes out now: a status
// that is not urgent waits out MinInterval since the last attempt, and an
// intermediate one right after a settled one waits SettleGrace once. The
// hold timer brings Run back to publish the latest.
func (l *reportLoop) holdBack(st *schema.DeviceStatus, have, settled bool) bool {
	o := &l.r.o
	urgent := settled && l.attempted && (!l.attemptedSettled || st.ObservedGeneration != l.attemptedGen)
	if urgent {
		return false
	}
	if l.holding {
		return true // the hold timer publishes the latest
	}
	if wait := o.MinInterval - o.Clock.Now().Sub(l.lastAttempt); !l.lastAttempt.IsZero() && wait > 0 {
		l.hold.Reset(wait)
		l.holding = true
		return true
	}
	if o.SettleGrace > 0 && !l.graced && have && !settled && l.attempted && l.attemptedSettled {
		// Work just started: it may settle before anyone needs
		// to see it in progress.
		l.graced = true
		l.hold.Reset(o.SettleGrace)
		l.holding = true
		return true
	}
	return false
}

// encode fills in what the Reporter owns in st and returns the status
// without time and node facts (key, compared with the last sent) and the
// payload to publish, with them. It returns false when st says nothing
// new and the publish is not forced, or cannot be encoded.
func (l *reportLoop) encode(st *schema.DeviceStatus, force bool) (key, payload []byte, ok bool) {
	o := &l.r.o
	st.TypeMeta = schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeviceStatus}
	st.Device = o.Device
	st.Agent = schema.AgentInfo{Version: o.Version, OS: goruntime.GOOS, Arch: goruntime.GOARCH,
		TimeZone: ZoneName(), UTCOffset: time.Now().Format("-07:00"), Upgrade: st.Agent.Upgrade}
	st.Time, st.Node = time.Time{}, nil
	key, err := json.Marshal(st)
	if err != nil {
		o.Logger.Error("encode status failed", "err", err)
		return nil, nil, false
	}
	if !force && bytes.Equal(key, l.sent) {
		return nil, nil, false
	}
	st.Time = o.Clock.Now().UTC()
	st.Node = o.NodeInfo()
	payload, err = json.Marshal(st)
	if err != nil {
		o.Logger.Error("encode status failed", "err", err)
		return nil, nil, false
	}
	return key, payload, true
}

// publish sends payload, the encoding of st, and records the attempt; a
// failure forces the next publish and retries it after PublishTimeout.
// It returns false once ctx is done.
func (l *reportLoop) publish(ctx context.Context, st *schema.DeviceStatus, key, payload []byte, settled bool) bool {
	o := &l.r.o
	if l.holding {
		// This publish carries the latest state; a later change
		// starts a new interval from it.
		l.hold.Stop()
		l.holding = false
	}
	l.lastAttempt = o.Clock.Now()
	l.graced = false
	l.attempted, l.attemptedSettled, l.attemptedGen = true, settled, st.ObservedGeneration
	pctx, cancel := context.WithTimeout(ctx, o.PublishTimeout)
	err := o.Publisher.Publish(pctx, o.Topic, true, payload)
	cancel()
	// A success also cancels the retry of an earlier failure.
	l.heartbeat.Stop()
	l.r.resetHeartbeat(l.heartbeat)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		l.r.setForce()                      // whatever it was, it still has to go out
		l.heartbeat.Reset(o.PublishTimeout) // retry, connected or not
		// Offline: the session calls Republish after reconnecting
		// (and the heartbeat, if any, retries meanwhile).
		o.Logger.Debug("publish status failed", "err", err)
		return true
	}
	l.sent, l.sentNode = key, st.Node
	if o.OnPublished != nil {
		o.OnPublished()
	}
	o.Logger.Debug("published status", "observedGeneration", st.ObservedGeneration, "pods", len(st.Pods))
	return true
}
