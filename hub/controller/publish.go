package controller

import (
	"context"
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

// publisher keeps the broker's retained topics in step with the desired
// states and deployment statuses: it knows what it published last, and
// publishes only what changed. It is used from the controller's goroutine
// only; the publishes themselves run on PublishWorkers goroutines.
type publisher struct {
	conn    Publisher
	topics  schema.Topics
	workers int
	timeout time.Duration
	log     *slog.Logger
	metrics *metrics.Metrics
	signer  DesiredSigner // nil: publish unsigned

	raw       map[string][]byte // JSON of desired, as stored and published
	published map[string]int64  // generation last published per device
	// unpublished holds the devices whose stored desired state was not
	// published since it was stored, with its generation: what an
	// incremental pass looks at (publishUnpublished), where a full pass
	// looks at every device (publishDesired).
	unpublished map[string]int64
	clears      map[string]string // topic → device: retained topics of deleted devices to clear
	depRaw      map[string][]byte // last published deployment status JSON
	depClears   map[string]bool   // deleted deployments whose status must be cleared
	failed      bool              // a publish failed since takeFailed
}

func newPublisher(opts Options) *publisher {
	return &publisher{
		conn: opts.Conn, topics: opts.Topics, workers: opts.PublishWorkers, timeout: opts.PublishTimeout,
		log: opts.Logger, metrics: opts.Metrics, signer: opts.Signer,
		raw:         map[string][]byte{},
		published:   map[string]int64{},
		unpublished: map[string]int64{},
		clears:      map[string]string{},
		depRaw:      map[string][]byte{},
		depClears:   map[string]bool{},
	}
}

// replaceRaw sets the stored JSON of every desired state, as loaded.
func (p *publisher) replaceRaw(raw map[string][]byte) { p.raw = raw }

// forget makes the next publishes send everything again.
func (p *publisher) forget() {
	clear(p.published)
	clear(p.depRaw)
}

// takeFailed reports, and resets, whether a publish failed.
func (p *publisher) takeFailed() bool {
	f := p.failed
	p.failed = false
	return f
}

// stored records a device's newly stored desired state.
func (p *publisher) stored(name string, gen int64, raw []byte) {
	p.raw[name] = raw
	p.unpublished[name] = gen
	for _, topic := range p.deviceTopics(name) {
		delete(p.clears, topic)
	}
}

// removed records that a device is gone: its retained topics get cleared.
func (p *publisher) removed(name string) {
	delete(p.raw, name)
	delete(p.published, name)
	delete(p.unpublished, name)
	for _, topic := range p.deviceTopics(name) {
		p.clears[topic] = name
	}
}

// deviceTopics are the retained topics cleared when a device is removed:
// its desired topic, and its own status and online topics, so monitors do
// not keep seeing a device that no longer exists.
func (p *publisher) deviceTopics(name string) []string {
	return []string{
		p.topics.Device(name, schema.TopicDesired),
		p.topics.Device(name, schema.TopicStatus),
		p.topics.Device(name, schema.TopicOnline),
	}
}

// message is one MQTT publish of a pass.
type message struct {
	topic   string
	payload []byte
	sign    bool   // payload is a desired state's canonical JSON: sign it
	done    func() // called, on the loop goroutine, once published
}

// publishDesired publishes every desired state not yet published at its
// generation, and clears the topics of removed devices.
func (p *publisher) publishDesired(ctx context.Context, desired iter.Seq2[string, *schema.DesiredState]) {
	var msgs []message
	for name, ds := range desired {
		if p.published[name] == ds.Generation {
			continue
		}
		msgs = append(msgs, p.desiredMessage(name, ds.Generation))
	}
	p.countDesired(p.publish(ctx, p.appendClears(msgs)))
}

// publishUnpublished is publishDesired for the devices whose desired state
// was stored but not published since (desired gives their states), with
// the clears of removed devices: what an incremental pass must publish.
// Any publish that fails makes the next pass a full one (takeFailed), so
// only what stored recorded can be left behind here, and the pass costs
// nothing per device of the fleet.
func (p *publisher) publishUnpublished(ctx context.Context, desired func(name string) *schema.DesiredState) {
	var msgs []message
	for name := range p.unpublished {
		ds := desired(name)
		if ds == nil || p.published[name] == ds.Generation {
			delete(p.unpublished, name)
			continue
		}
		msgs = append(msgs, p.desiredMessage(name, ds.Generation))
	}
	p.countDesired(p.publish(ctx, p.appendClears(msgs)))
}

// appendClears adds the clears of removed devices' retained topics.
func (p *publisher) appendClears(msgs []message) []message {
	for topic := range p.clears {
		msgs = append(msgs, message{topic: topic, done: func() { delete(p.clears, topic) }})
	}
	return msgs
}

func (p *publisher) countDesired(n int) {
	if p.metrics != nil {
		p.metrics.DesiredPublishes.Add(float64(n))
	}
}

// desiredMessage is the retained publish of a device's desired state,
// signed by the signer when there is one: the stored JSON is the
// canonical form, and the publishing workers sign it afresh for each
// publish (in parallel; a rotated key signs the next one).
func (p *publisher) desiredMessage(name string, gen int64) message {
	return message{
		topic: p.topics.Device(name, schema.TopicDesired), payload: p.raw[name],
		sign: p.signer != nil,
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

// publishDeploymentStatuses publishes the statuses in live that changed
// since they were last published, and clears the published status of the
// deployments gone (and of those whose clear failed before).
func (p *publisher) publishDeploymentStatuses(ctx context.Context, live []namedStatus, gone []string) {
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
			p.log.Error("encode deployment status", "deployment", s.name, "err", err)
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
	n := p.publish(ctx, msgs)
	if p.metrics != nil {
		p.metrics.DeploymentStatusPublishes.Add(float64(n))
	}
}

// deletedDeployments returns the deployments with a published status that
// are not in deployments.
func (p *publisher) deletedDeployments(deployments map[string]*schema.Deployment) []string {
	var out []string
	for name := range p.depRaw {
		if _, ok := deployments[name]; !ok {
			out = append(out, name)
		}
	}
	return out
}

// clearing reports whether deployment statuses wait to be cleared.
func (p *publisher) clearing() bool { return len(p.depClears) > 0 }

// publish sends msgs with up to PublishWorkers in flight, calls done for
// each one published, and returns how many were published. What failed
// is left for a later pass.
func (p *publisher) publish(ctx context.Context, msgs []message) int {
	return p.finish(p.send(ctx, msgs))
}

// sending is a batch of publishes under way (see send).
type sending struct {
	msgs     []message
	ok       []bool
	firstErr atomic.Pointer[error]
	wg       sync.WaitGroup
	parent   context.Context
	cancel   context.CancelFunc
}

// send starts publishing msgs with up to PublishWorkers in flight and
// returns at once; finish waits and records the outcome. It touches no
// publisher state, so several batches may be under way.
func (p *publisher) send(ctx context.Context, msgs []message) *sending {
	s := &sending{msgs: msgs, ok: make([]bool, len(msgs)), parent: ctx}
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
					signed, err := p.signer.SignDesiredState(payload)
					if err != nil {
						err = fmt.Errorf("sign the desired state for %s: %w", msgs[i].topic, err)
						s.firstErr.CompareAndSwap(nil, &err)
						continue
					}
					payload = signed
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

// finish waits for a batch, calls done for each message published (on the
// loop goroutine) and returns how many were. A failure is logged and
// recorded for takeFailed.
func (p *publisher) finish(s *sending) int {
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
