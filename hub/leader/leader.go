package leader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fleetmq/fleet/schema"
)

// DefaultLeaseTTL is the default TTL of a hub's lease (--leader-lease):
// a dead leader is replaced within it.
const DefaultLeaseTTL = 10 * time.Second

// MinLeaseTTL is the shortest lease etcd grants (with its default
// heartbeat and election timeout).
const MinLeaseTTL = 2 * time.Second

// ErrLostLeadership ends Run after a term: the hub was deposed, lost its
// lease or was fenced, and stops acting as leader.
var ErrLostLeadership = errors.New("lost leadership")

// Options configure an Elector. Client, Prefix and Member.ID are required.
type Options struct {
	// Client is the store's etcd client (store.Store.EtcdClient).
	Client *clientv3.Client
	// Prefix is the fleet's etcd prefix (the store's, e.g. "/fleet/").
	Prefix string
	// Member is what the hub registers; Started, Lease and the lease
	// fields are filled in.
	Member schema.HubMember
	// LeaseTTL is the lease's TTL, whole seconds; default DefaultLeaseTTL,
	// at least MinLeaseTTL.
	LeaseTTL time.Duration
	// Logger; default discards.
	Logger *slog.Logger
	// Metrics, if set, counts leadership (NewMetrics).
	Metrics *Metrics
	// OnLeader, if set, is called with true when a term starts (before
	// Run's function, from Run's goroutine) and with false, once, as soon
	// as the term's context ends (from a goroutine of Run's, possibly
	// before the function returned: it may be stuck on a partitioned
	// etcd).
	OnLeader func(bool)
	// Now is the clock of the renewal watchdog; default time.Now.
	Now func() time.Time
}

// Elector campaigns for the leadership of one hub. Use New, then Run.
type Elector struct {
	o      Options
	log    *slog.Logger
	leader atomic.Bool
	// seen is the leader's ID as this hub last observed it.
	mu   sync.Mutex
	seen string
	// standby is closed once another hub is seen leading.
	standby     chan struct{}
	standbyOnce sync.Once
}

// New checks the options and returns an Elector.
func New(o Options) (*Elector, error) {
	if o.Client == nil {
		return nil, errors.New("leader: Client is required")
	}
	if o.Prefix == "" {
		return nil, errors.New("leader: Prefix is required")
	}
	if err := schema.ValidateName(o.Member.ID); err != nil {
		return nil, fmt.Errorf("--hub-id %q: %w", o.Member.ID, err)
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if err := CheckLeaseTTL(o.LeaseTTL); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Elector{o: o, log: o.Logger, standby: make(chan struct{})}, nil
}

// CheckLeaseTTL refuses a --leader-lease etcd cannot grant.
func CheckLeaseTTL(d time.Duration) error {
	if d < MinLeaseTTL || d%time.Second != 0 {
		return fmt.Errorf("--leader-lease %s: want whole seconds, at least %s (e.g. 10s)", d, MinLeaseTTL)
	}
	return nil
}

// Standby is closed once this hub has seen another hub lead: it is a
// standby (for now).
func (e *Elector) Standby() <-chan struct{} { return e.standby }

// IsLeader reports whether a term is running.
func (e *Elector) IsLeader() bool { return e.leader.Load() }

// ElectionPrefix is where the hubs of the fleet under prefix campaign.
func ElectionPrefix(prefix string) string { return prefix + "leader/" }

// MembersPrefix is where the hubs of the fleet under prefix register.
func MembersPrefix(prefix string) string { return prefix + "hubs/" }

// Run registers the hub and campaigns until it wins, then runs lead for
// one term, with a context that carries the term's store.Fence and ends
// with the term. It returns nil when ctx ends (having resigned), lead's
// error if lead failed on its own, or an error wrapping
// ErrLostLeadership when the term ended for any other reason. A standby
// whose session ends (etcd unreachable past its TTL) registers and
// campaigns again.
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context) error) error {
	backoff := 200 * time.Millisecond
	for {
		sess, err := e.session(ctx)
		if err == nil {
			var el *concurrency.Election
			el, err = e.campaign(ctx, sess)
			if el != nil {
				return e.term(ctx, sess, el, lead)
			}
			closeSession(sess, e.o.LeaseTTL)
		}
		if ctx.Err() != nil {
			return nil
		}
		e.log.Warn("leader election: standby session lost; registering again", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff + rand.N(backoff)):
		}
		backoff = min(2*backoff, e.o.LeaseTTL)
	}
}

// session grants the lease and registers the hub under it.
func (e *Elector) session(ctx context.Context) (*concurrency.Session, error) {
	sess, err := concurrency.NewSession(e.o.Client, concurrency.WithTTL(int(e.o.LeaseTTL/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("leader: grant lease: %w", err)
	}
	m := e.o.Member
	m.Started = e.o.Now().UTC().Truncate(time.Second)
	m.Lease = strconv.FormatInt(int64(sess.Lease()), 16)
	m.LeaseTTLSeconds = int64(e.o.LeaseTTL / time.Second)
	m.Leader, m.LeaseRemainingSeconds = false, 0
	b, err := json.Marshal(m)
	if err != nil {
		return nil, errors.Join(err, sess.Close())
	}
	rctx, cancel := context.WithTimeout(ctx, e.o.LeaseTTL)
	defer cancel()
	if _, err := e.o.Client.Put(rctx, MembersPrefix(e.o.Prefix)+m.ID, string(b), clientv3.WithLease(sess.Lease())); err != nil {
		return nil, errors.Join(fmt.Errorf("leader: register hub %s: %w", m.ID, err), sess.Close())
	}
	e.log.Info("hub registered", "hub", m.ID, "lease", m.Lease, "ttl", e.o.LeaseTTL)
	return sess, nil
}

// campaign waits until this hub is the leader (it returns the election
// won), its session ends or ctx does (nil). It observes the election
// meanwhile, for the metrics.
func (e *Elector) campaign(ctx context.Context, sess *concurrency.Session) (*concurrency.Election, error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sess.Done():
			cancel()
		case <-cctx.Done():
		}
	}()
	// NewElection adds the "/" itself.
	el := concurrency.NewElection(sess, strings.TrimSuffix(ElectionPrefix(e.o.Prefix), "/"))
	go e.observe(cctx, el)
	if err := el.Campaign(cctx, e.o.Member.ID); err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("leader: campaign: %w", err)
	}
	// Campaign returns once every older key is gone, even if ours went
	// with its lease meanwhile: make sure the key is still ours.
	gctx, gcancel := context.WithTimeout(ctx, e.o.LeaseTTL)
	defer gcancel()
	resp, err := e.o.Client.Get(gctx, el.Key())
	if err != nil {
		return nil, fmt.Errorf("leader: check election key: %w", err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != el.Rev() {
		return nil, errors.New("leader: election key gone before the term began (lease lost)")
	}
	return el, nil
}

// observe follows who leads, counting changes.
func (e *Elector) observe(ctx context.Context, el *concurrency.Election) {
	for resp := range el.Observe(ctx) {
		id := ""
		if len(resp.Kvs) > 0 {
			id = string(resp.Kvs[0].Value)
		}
		e.noteLeader(id)
	}
}

func (e *Elector) noteLeader(id string) {
	e.mu.Lock()
	changed := id != e.seen
	prev := e.seen
	e.seen = id
	e.mu.Unlock()
	if id != "" && id != e.o.Member.ID {
		e.standbyOnce.Do(func() { close(e.standby) })
	}
	if changed {
		e.log.Info("leader changed", "leader", id, "previous", prev)
		if e.o.Metrics != nil {
			e.o.Metrics.Changes.Inc()
		}
	}
}

// closeSession revokes the session's lease (its keys go at once), within
// a bound.
func closeSession(sess *concurrency.Session, ttl time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), min(ttl, 3*time.Second))
	defer cancel()
	_, _ = sess.Client().Revoke(ctx, sess.Lease())
	sess.Orphan()
}
