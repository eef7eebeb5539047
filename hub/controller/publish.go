package controller

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleet/hub/metrics"
	"github.com/fleetmq/fleet/schema"
)

// Publishing. The broker's retained topics are a cache of the store: the
// desired writer keeps the devices' desired topics (desiredTopics), the
// status aggregator the deployments' status topics (statusTopics); each
// knows what it published last and publishes only what changed, through
// the one sender, which runs the publishes on PublishWorkers goroutines
// and remembers whether one failed. They are used from the controller's
// goroutine only.

// sender publishes batches of retained messages.
type sender struct {
	conn    Publisher
	workers int
	timeout time.Duration
	log     *slog.Logger
	signer  DesiredSigner // nil: publish unsigned
	failed  bool          // a publish failed since takeFailed
}

func newSender(opts Options) *sender {
	return &sender{conn: opts.Conn, workers: opts.PublishWorkers, timeout: opts.PublishTimeout, log: opts.Logger, signer: opts.Signer}
}

// takeFailed reports, and resets, whether a publish failed.
func (p *sender) takeFailed() bool {
	f := p.failed
	p.failed = false
	return f
}

// message is one MQTT publish of a pass.
type message struct {
	topic   string
	payload []byte
	sign    bool   // payload is a desired state's canonical JSON: sign it
	done    func() // called, on the loop goroutine, once published
	// cached is the signature kept from an earlier publish, if any;
	// keep, if set, is given a new one made for this publish (on the
	// loop goroutine, once published).
	cached *sigEntry
	keep   func(*sigEntry)
}

// desiredTopics keeps the devices' retained desired topics in step with
// their stored desired states.
type desiredTopics struct {
	out     *sender
	topics  schema.Topics
	metrics *metrics.Metrics

	raw       map[string][]byte // JSON of desired, as stored and published
	published map[string]int64  // generation last published per device
	// unpublished holds the devices whose stored desired state was not
	// published since it was stored, with its generation: what an
	// incremental pass looks at (publishUnpublished), where a full pass
	// looks at every device (publishDesired).
	unpublished map[string]int64
	clears      map[string]string // topic → device: retained topics of deleted devices to clear
	sigs        *sigCache         // signatures kept for reuse (sigcache.go)
	// held, if set, names the devices sent nothing (restorehold.go).
	held func(name string) bool
}

func newDesiredTopics(s *sender, opts Options) *desiredTopics {
	return &desiredTopics{
		out: s, topics: opts.Topics, metrics: opts.Metrics,
		raw:         map[string][]byte{},
		published:   map[string]int64{},
		unpublished: map[string]int64{},
		clears:      map[string]string{},
		sigs:        newSigCache(opts.Store, opts.Logger),
	}
}

// replaceRaw sets the stored JSON of every desired state, as loaded.
func (p *desiredTopics) replaceRaw(raw map[string][]byte) { p.raw = raw }

// forget makes the next publishes send everything again.
func (p *desiredTopics) forget() { clear(p.published) }

// stored records a device's newly stored desired state.
func (p *desiredTopics) stored(name string, gen int64, raw []byte) {
	p.raw[name] = raw
	p.unpublished[name] = gen
	for _, topic := range p.deviceTopics(name) {
		delete(p.clears, topic)
	}
}

// removed records that a device is gone: its retained topics get cleared.
func (p *desiredTopics) removed(name string) {
	delete(p.raw, name)
	delete(p.published, name)
	delete(p.unpublished, name)
	p.sigs.remove(name)
	for _, topic := range p.deviceTopics(name) {
		p.clears[topic] = name
	}
}

// deviceTopics are the retained topics cleared when a device is removed:
// its desired topic, and its own status and online topics, so monitors do
// not keep seeing a device that no longer exists.
func (p *desiredTopics) deviceTopics(name string) []string {
	return []string{
		p.topics.Device(name, schema.TopicDesired),
		p.topics.Device(name, schema.TopicStatus),
		p.topics.Device(name, schema.TopicOnline),
	}
}

// publishDesired publishes every desired state not yet published at its
// generation, and clears the topics of removed devices.
func (p *desiredTopics) publishDesired(ctx context.Context, desired iter.Seq2[string, *schema.DesiredState]) {
	var msgs []message
	for name, ds := range desired {
		if p.published[name] == ds.Generation || p.held != nil && p.held(name) {
			continue
		}
		msgs = append(msgs, p.desiredMessage(name, ds.Generation))
	}
	p.countDesired(p.out.publish(ctx, p.appendClears(msgs)))
}

// publishUnpublished is publishDesired for the devices whose desired state
// was stored but not published since (desired gives their states), with
// the clears of removed devices: what an incremental pass must publish.
// Any publish that fails makes the next pass a full one (takeFailed), so
// only what stored recorded can be left behind here, and the pass costs
// nothing per device of the fleet.
func (p *desiredTopics) publishUnpublished(ctx context.Context, desired func(name string) *schema.DesiredState) {
	var msgs []message
	for name := range p.unpublished {
		ds := desired(name)
		if ds == nil || p.published[name] == ds.Generation {
			delete(p.unpublished, name)
			continue
		}
		if p.held != nil && p.held(name) {
			continue
		}
		msgs = append(msgs, p.desiredMessage(name, ds.Generation))
	}
	p.countDesired(p.out.publish(ctx, p.appendClears(msgs)))
}

// appendClears adds the clears of removed devices' retained topics.
func (p *desiredTopics) appendClears(msgs []message) []message {
	for topic := range p.clears {
		msgs = append(msgs, message{topic: topic, done: func() { delete(p.clears, topic) }})
	}
	return msgs
}

func (p *desiredTopics) countDesired(n int) {
	if p.metrics != nil {
		p.metrics.DesiredPublishes.Add(float64(n))
	}
}

// desiredMessage is the retained publish of a device's desired state,
// signed by the signer when there is one: the stored JSON is the
// canonical form, and the publishing workers sign it (in parallel; a
// rotated key signs the next one), or reuse the signature kept from an
// earlier publish of the same bytes under the same key (sigcache.go).
func (p *desiredTopics) desiredMessage(name string, gen int64) message {
	return message{
		topic: p.topics.Device(name, schema.TopicDesired), payload: p.raw[name],
		sign:   p.out.signer != nil,
		cached: p.sigs.entries[name],
		keep:   func(e *sigEntry) { p.sigs.put(name, e) },
		done: func() {
			p.published[name] = gen
			if p.unpublished[name] == gen {
				delete(p.unpublished, name)
			}
		},
	}
}

// deploymentStatusMessage is the payload of
// {prefix}/deployments/{name}/status.
type deploymentStatusMessage struct {
	schema.TypeMeta
	Name string `json:"name"`
	schema.DeploymentStatus
}

// namedStatus is a deployment's status.
type namedStatus struct {
	name   string
	status schema.DeploymentStatus
}

// statusTopics keeps the deployments' retained status topics in step with
// their statuses.
type statusTopics struct {
	out       *sender
	topics    schema.Topics
	metrics   *metrics.Metrics
	depRaw    map[string][]byte // last published deployment status JSON
	depClears map[string]bool   // deleted deployments whose status must be cleared
}

func newStatusTopics(s *sender, opts Options) *statusTopics {
	return &statusTopics{out: s, topics: opts.Topics, metrics: opts.Metrics, depRaw: map[string][]byte{}, depClears: map[string]bool{}}
}

// forget makes the next publishes send everything again.
func (p *statusTopics) forget() { clear(p.depRaw) }

// publishDeploymentStatuses publishes the statuses in live that changed
// since they were last published, and clears the published status of the
// deployments gone (and of those whose clear failed before).
func (p *statusTopics) publishDeploymentStatuses(ctx context.Context, live []namedStatus, gone []string) {
	var msgs []message
	for _, name := range gone {
		if p.depRaw[name] != nil {
			p.depClears[name] = true
		}
	}
	for _, s := range live {
		raw, err := json.Marshal(deploymentStatusMessage{
			TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "DeploymentStatus"},
			Name:     s.name, DeploymentStatus: s.status,
		})
		if err != nil {
			p.out.log.Error("encode deployment status", "deployment", s.name, "err", err)
			continue
		}
		delete(p.depClears, s.name)
		if string(p.depRaw[s.name]) == string(raw) {
			continue
		}
		msgs = append(msgs, message{topic: p.topics.DeploymentStatus(s.name), payload: raw, done: func() { p.depRaw[s.name] = raw }})
	}
	for name := range p.depClears {
		msgs = append(msgs, message{topic: p.topics.DeploymentStatus(name), done: func() {
			delete(p.depRaw, name)
			delete(p.depClears, name)
		}})
	}
	n := p.out.publish(ctx, msgs)
	if p.metrics != nil {
		p.metrics.DeploymentStatusPublishes.Add(float64(n))
	}
}

// deletedDeployments returns the deployments with a published status that
// deployment does not find.
func (p *statusTopics) deletedDeployments(deployment func(string) (*schema.Deployment, bool)) []string {
	var out []string
	for name := range p.depRaw {
		if _, ok := deployment(name); !ok {
			out = append(out, name)
		}
	}
	return out
}

// clearing reports whether deployment statuses wait to be cleared.
func (p *statusTopics) clearing() bool { return len(p.depClears) > 0 }

// publish sends msgs with up to PublishWorkers in flight, calls done for
// each one published, and returns how many were published. What failed
// is left for a later pass.
func (p *sender) publish(ctx context.Context, msgs []message) int {
	return p.finish(p.send(ctx, msgs))
}

// sending is a batch of publishes under way (see send).
type sending struct {
	msgs     []message
	ok       []bool
	fresh    []*sigEntry // signatures made for msgs, to keep
	firstErr atomic.Pointer[error]
	wg       sync.WaitGroup
	parent   context.Context
	cancel   context.CancelFunc
}

// send starts publishing msgs with up to PublishWorkers in flight and
// returns at once; finish waits and records the outcome. It touches no
// topic state, so several batches may be under way.
func (p *sender) send(ctx context.Context, msgs []message) *sending {
	s := &sending{msgs: msgs, ok: make([]bool, len(msgs)), fresh: make([]*sigEntry, len(msgs)), parent: ctx}
	if len(msgs) == 0 {
		return s
	}
	ctx, s.cancel = context.WithTimeout(ctx, p.timeout)
	var next atomic.Int64
	for range min(p.workers, len(msgs)) {
		s.wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(msgs) || ctx.Err() != nil {
					return
				}
				payload := msgs[i].payload
				if msgs[i].sign {
					signed, fresh, err := p.sign(payload, msgs[i].cached)
					if err != nil {
						err = fmt.Errorf("sign the desired state for %s: %w", msgs[i].topic, err)
						s.firstErr.CompareAndSwap(nil, &err)
						continue
					}
					payload, s.fresh[i] = signed, fresh
				}
				if err := p.conn.Publish(ctx, msgs[i].topic, payload, true); err != nil {
					s.firstErr.CompareAndSwap(nil, &err)
					continue
				}
				s.ok[i] = true
			}
		})
	}
	return s
}

// sign returns canonical signed: with cached's signature when it was made
// over the same bytes by the signer as it is now, else signed afresh,
// with the new signature to keep (nil when the signer's are not kept).
func (p *sender) sign(canonical []byte, cached *sigEntry) (signed []byte, fresh *sigEntry, err error) {
	rs, ok := p.signer.(ReusableSigner)
	if !ok {
		signed, err = p.signer.SignDesiredState(canonical)
		return signed, nil, err
	}
	// The identity is read before signing: a rotation in between keeps
	// the new signature under the old identity, which is never reused.
	identity := rs.SignatureIdentity()
	sum := sha256.Sum256(canonical)
	if out, ok := cached.signedPayload(canonical, identity, sum); ok {
		return out, nil, nil
	}
	if signed, err = rs.SignDesiredState(canonical); err != nil {
		return nil, nil, err
	}
	return signed, newSigEntry(canonical, signed, identity, sum), nil
}

// finish waits for a batch, calls done for each message published (on the
// loop goroutine) and returns how many were. A failure is logged and
// recorded for takeFailed.
func (p *sender) finish(s *sending) int {
	s.wg.Wait()
	if s.cancel != nil {
		s.cancel()
	}
	n := 0
	for i, m := range s.msgs {
		if s.ok[i] {
			n++
			if m.done != nil {
				m.done()
			}
			if s.fresh[i] != nil && m.keep != nil {
				m.keep(s.fresh[i])
			}
		}
	}
	if n < len(s.msgs) && s.parent.Err() == nil {
		var err error
		if e := s.firstErr.Load(); e != nil {
			err = *e
		}
		p.log.Warn("mqtt publish failed; retrying", "published", n, "failed", len(s.msgs)-n, "err", err)
		p.failed = true
	}
	return n
}
