package containerd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/events"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fleetmq/fleet/edgeagent/runtime"
)

const (
	exitTopic = "/tasks/exit"
	// syncTopic carries the marker Exits publishes to itself to learn that
	// its subscription is live (containerd does not acknowledge one).
	syncTopic = "/fleet/runtime/exits-sync"
	// syncTimeout bounds the wait for that marker.
	syncTimeout = 10 * time.Second
)

// Exits streams the exits of managed containers' tasks until ctx is done or
// the event stream fails (daemon restart, Close); then the channel is
// closed and the caller should re-List and call Exits again. Exits returns
// once the subscription is live, so every exit after it returns is
// delivered.
func (r *Runtime) Exits(ctx context.Context) (<-chan runtime.ExitEvent, error) {
	ctx, cancel := context.WithCancel(r.nsCtx(ctx))
	ns := r.opts.Namespace
	evC, errC := r.client.EventService().Subscribe(ctx,
		fmt.Sprintf(`topic==%q,namespace==%q`, exitTopic, ns),
		fmt.Sprintf(`topic==%q,namespace==%q`, syncTopic, ns))

	pending, err := r.awaitSubscribed(ctx, evC, errC)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("subscribe to task exits: %w", err)
	}

	out := make(chan runtime.ExitEvent, 16)
	go func() {
		defer close(out)
		defer cancel()
		send := func(env *events.Envelope) bool {
			ev, ok := r.exitEvent(ctx, env)
			if !ok {
				return true
			}
			select {
			case out <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for _, env := range pending {
			if !send(env) {
				return
			}
		}
		for {
			select {
			case <-ctx.Done():
				return
			case err := <-errC:
				if err != nil && ctx.Err() == nil && !r.closed.Load() {
					r.log.Warn("task exit stream ended", "err", err)
				}
				return
			case env := <-evC:
				if !send(env) {
					return
				}
			}
		}
	}()
	return out, nil
}

// awaitSubscribed publishes a marker on syncTopic until it comes back
// through the subscription, and returns the exit events seen meanwhile.
func (r *Runtime) awaitSubscribed(ctx context.Context, evC <-chan *events.Envelope, errC <-chan error) ([]*events.Envelope, error) {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	token := hex.EncodeToString(b[:])
	deadline := time.NewTimer(syncTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()

	var pending []*events.Envelope
	publish := func() error {
		return r.client.EventService().Publish(ctx, syncTopic, wrapperspb.String(token))
	}
	if err := publish(); err != nil {
		return nil, fmt.Errorf("publish marker: %w", err)
	}
	for {
		select {
		case env := <-evC:
			if env.Topic != syncTopic {
				pending = append(pending, env)
				continue
			}
			v, err := typeurl.UnmarshalAny(env.Event)
			if err != nil {
				continue
			}
			if s, ok := v.(*wrapperspb.StringValue); ok && s.Value == token {
				return pending, nil
			}
		case err := <-errC:
			if err == nil {
				err = errors.New("stream closed")
			}
			return nil, err
		case <-tick.C:
			if err := publish(); err != nil {
				return nil, fmt.Errorf("publish marker: %w", err)
			}
		case <-deadline.C:
			return nil, errors.New("subscription not live after " + syncTimeout.String())
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// exitEvent decodes a /tasks/exit envelope of a managed container's init
// process.
func (r *Runtime) exitEvent(ctx context.Context, env *events.Envelope) (runtime.ExitEvent, bool) {
	if env.Topic != exitTopic {
		return runtime.ExitEvent{}, false
	}
	v, err := typeurl.UnmarshalAny(env.Event)
	if err != nil {
		r.log.Warn("decode task exit", "err", err)
		return runtime.ExitEvent{}, false
	}
	e, ok := v.(*eventstypes.TaskExit)
	if !ok || e.ID != e.ContainerID { // exec'd processes are not containers
		return runtime.ExitEvent{}, false
	}
	c, err := r.client.ContainerService().Get(ctx, e.ContainerID)
	if err != nil {
		if !errdefs.IsNotFound(err) && ctx.Err() == nil {
			r.log.Warn("task exit: load container", "container", e.ContainerID, "err", err)
		}
		return runtime.ExitEvent{}, false // removed meanwhile, or stream ending
	}
	if c.Labels[runtime.LabelManaged] != "true" {
		return runtime.ExitEvent{}, false
	}
	at := env.Timestamp
	if e.ExitedAt != nil {
		at = e.ExitedAt.AsTime()
	}
	return runtime.ExitEvent{ID: e.ContainerID, ExitCode: int32(e.ExitStatus), At: at}, true
}
