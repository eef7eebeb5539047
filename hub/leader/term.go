package leader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fleetmq/fleet/hub/store"
)

// term runs lead while this hub leads, and ends it on the first of: ctx
// done, the session ended, the lease not renewed for two thirds of its
// TTL, a fenced commit refused, lead returning.
func (e *Elector) term(ctx context.Context, sess *concurrency.Session, el *concurrency.Election, lead func(ctx context.Context) error) error {
	tctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	fence := &store.Fence{Key: el.Key(), Rev: el.Rev(), Lost: func(err error) {
		stop(fmt.Errorf("%w: %w", ErrLostLeadership, err))
	}}
	var watching sync.WaitGroup
	watching.Go(func() { e.watch(tctx, sess, stop) })
	e.setLeader(true)
	e.noteLeader(e.o.Member.ID)
	e.log.Info("leader elected: this hub leads", "hub", e.o.Member.ID, "election_key", el.Key(), "revision", el.Rev())
	// The term ends for the hub's other parts (the broker goes on standby)
	// the moment its context does, not once lead has returned: lead may
	// be stuck in a store call a partition holds up past the lease's end.
	var ending sync.Once
	end := func() { ending.Do(func() { e.setLeader(false) }) }
	watching.Go(func() {
		<-tctx.Done()
		if cause := context.Cause(tctx); cause != nil && errors.Is(cause, ErrLostLeadership) {
			e.log.Warn("leadership ending: this hub stops acting as leader", "hub", e.o.Member.ID, "err", cause)
		}
		end()
	})
	err := lead(store.WithFence(tctx, fence))
	cause := context.Cause(tctx)
	stop(nil)
	watching.Wait()
	end()
	if ctx.Err() != nil {
		// A clean stop: hand over at once rather than after the TTL.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
		rerr := el.Resign(rctx)
		cancel()
		closeSession(sess, e.o.LeaseTTL)
		e.log.Info("leadership resigned", "hub", e.o.Member.ID, "err", rerr)
		return nil
	}
	closeSession(sess, e.o.LeaseTTL)
	switch {
	case cause != nil && errors.Is(cause, ErrLostLeadership):
		e.log.Error("leadership lost: this hub stopped leading", "hub", e.o.Member.ID, "err", cause)
		return cause
	case err != nil:
		return err
	}
	return fmt.Errorf("%w: the leader's work ended", ErrLostLeadership)
}

func (e *Elector) setLeader(on bool) {
	e.leader.Store(on)
	if e.o.Metrics != nil {
		v := 0.0
		if on {
			v = 1
		}
		e.o.Metrics.Leader.Set(v)
	}
	if e.o.OnLeader != nil {
		e.o.OnLeader(on)
	}
}

// renewalLimit is how long the lease may go unrenewed before a leader
// steps down: two thirds of the TTL, a third before etcd lets it expire
// (the client renews every third of the TTL, so one lost renewal is
// tolerated).
func (e *Elector) renewalLimit() time.Duration { return e.o.LeaseTTL * 2 / 3 }

// watch stops the term when the session ends or the lease's renewals stop
// arriving.
func (e *Elector) watch(ctx context.Context, sess *concurrency.Session, stop context.CancelCauseFunc) {
	lease := int64(sess.Lease())
	ka, err := e.o.Client.KeepAlive(ctx, sess.Lease())
	if err != nil {
		stop(fmt.Errorf("%w: watch the renewals of lease %x: %w", ErrLostLeadership, lease, err))
		return
	}
	last := e.o.Now()
	tick := time.NewTicker(max(e.o.LeaseTTL/20, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sess.Done():
			stop(fmt.Errorf("%w: session ended (lease %x expired or revoked)", ErrLostLeadership, lease))
			return
		case r, ok := <-ka:
			if !ok || r.TTL <= 0 {
				stop(fmt.Errorf("%w: lease %x no longer renewed (expired or revoked)", ErrLostLeadership, lease))
				return
			}
			last = e.o.Now()
		case <-tick.C:
			if since := e.o.Now().Sub(last); since > e.renewalLimit() {
				stop(fmt.Errorf("%w: lease %x not renewed for %s (TTL %s): stepping down before it ends", ErrLostLeadership, lease, since.Round(time.Millisecond), e.o.LeaseTTL))
				return
			}
		}
	}
}
