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
// twentieth. Uptime alone never is (the hub ages it from the status time).
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
		absDiff(sent.DiskFreeBytes, now.DiskFreeBytes) >= now.DiskTotalBytes/20 && now.DiskTotalBytes > 0
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
	var sent []byte // the last published status without time and node facts
	var lastAttempt time.Time
	// What the last attempted publish said: a settled status is urgent
	// (skips MinInterval) only if it ends an intermediate state or moves
	// observedGeneration, so the rate stays bounded by the intermediate
	// publishes (one per interval) and the hub's desired-state changes.
	attempted, attemptedSettled, attemptedGen := false, false, int64(0)
	var sentNode *schema.NodeInfo // the node figures last sent
	heartbeat := r.o.Clock.NewTimer(time.Hour)
	heartbeat.Stop()
	r.resetHeartbeat(heartbeat)
	defer heartbeat.Stop()
	nodeCheck := r.o.Clock.NewTimer(time.Hour)
	nodeCheck.Stop()
	if r.o.NodeCheck > 0 {
		nodeCheck.Reset(r.o.NodeCheck)
	}
	defer nodeCheck.Stop()
	hold := r.o.Clock.NewTimer(time.Hour)
	hold.Stop()
	defer hold.Stop()
	holding := false
	graced := false // the intermediate status being held had its grace
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.kick:
		case <-heartbeat.C():
			r.mu.Lock()
			r.force = true
			r.mu.Unlock()
		case <-nodeCheck.C():
			nodeCheck.Reset(r.o.NodeCheck)
			if sentNode == nil || !NodeMoved(sentNode, r.o.NodeInfo()) {
				continue
			}
			r.mu.Lock()
			r.force = true
			r.mu.Unlock()
		case <-hold.C():
			holding = false
		}

		r.mu.Lock()
		st, have := r.latest, r.have
		r.mu.Unlock()
		settled := have && Settled(&st)
		urgent := settled && attempted && (!attemptedSettled || st.ObservedGeneration != attemptedGen)
		if !urgent {
			if holding {
				continue // the hold timer publishes the latest
			}
			if wait := r.o.MinInterval - r.o.Clock.Now().Sub(lastAttempt); !lastAttempt.IsZero() && wait > 0 {
				hold.Reset(wait)
				holding = true
				continue
			}
			if r.o.SettleGrace > 0 && !graced && have && !settled && attempted && attemptedSettled {
				// Work just started: it may settle before anyone needs
				// to see it in progress.
				graced = true
				hold.Reset(r.o.SettleGrace)
				holding = true
				continue
			}
		}

		r.mu.Lock()
		force := r.force
		r.force = false
		r.mu.Unlock()
		if !have {
			r.resetHeartbeat(heartbeat)
			continue
		}
		st.TypeMeta = schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeviceStatus}
		st.Device = r.o.Device
		st.Agent = schema.AgentInfo{Version: r.o.Version, OS: goruntime.GOOS, Arch: goruntime.GOARCH}
		st.Time, st.Node = time.Time{}, nil
		key, err := json.Marshal(st)
		if err != nil {
			r.o.Logger.Error("encode status failed", "err", err)
			continue
		}
		if !force && bytes.Equal(key, sent) {
			continue
		}
		st.Time = r.o.Clock.Now().UTC()
		st.Node = r.o.NodeInfo()
		payload, err := json.Marshal(st)
		if err != nil {
			r.o.Logger.Error("encode status failed", "err", err)
			continue
		}
		if holding {
			// This publish carries the latest state; a later change
			// starts a new interval from it.
			hold.Stop()
			holding = false
		}
		lastAttempt = r.o.Clock.Now()
		graced = false
		attempted, attemptedSettled, attemptedGen = true, settled, st.ObservedGeneration
		pctx, cancel := context.WithTimeout(ctx, r.o.PublishTimeout)
		err = r.o.Publisher.Publish(pctx, r.o.Topic, true, payload)
		cancel()
		// A success also cancels the retry of an earlier failure.
		heartbeat.Stop()
		r.resetHeartbeat(heartbeat)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			r.mu.Lock()
			r.force = true // whatever it was, it still has to go out
			r.mu.Unlock()
			heartbeat.Reset(r.o.PublishTimeout) // retry, connected or not
			// Offline: the session calls Republish after reconnecting
			// (and the heartbeat, if any, retries meanwhile).
			r.o.Logger.Debug("publish status failed", "err", err)
			continue
		}
		sent, sentNode = key, st.Node
		r.o.Logger.Debug("published status", "observedGeneration", st.ObservedGeneration, "pods", len(st.Pods))
	}
}
