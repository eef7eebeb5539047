package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// ObjectRef names one object: its kind and name.
type ObjectRef struct {
	Kind Kind
	Name string
}

// trackListAbove is the number of objects of one kind still tracked above
// which a re-read lists them instead of reading them one by one.
const trackListAbove = 5

// A Tracker follows a set of objects, level-based: it hands its handler the
// latest state of each object as lists, watch events and re-reads show it,
// until the caller marks every object Done. It follows each kind with
// Follow, and follows it again when Follow gives up on a hub that stays
// unreachable (restarting, say); it re-reads the objects not done every
// Resync, since a status change (a device coming online, a deployment's
// counts) is not a write and sends no watch event (hub/API.md).
//
// Only the goroutine of Run touches a Tracker: the handler may call Done
// and Objects.
type Tracker struct {
	// Resync is how often the objects not done are re-read; 0 never.
	Resync time.Duration
	// Retry is the pause before following a kind again once Follow gave
	// up (default 1s).
	Retry time.Duration

	c      *Client
	groups []*trackGroup
	objs   []*tracked // in the order given, or of the first list
	byRef  map[ObjectRef]*tracked
}

// trackGroup is the objects of one kind, followed by one watch.
type trackGroup struct {
	kind Kind
	// selector is what the watch selects; user is the caller's selector
	// ("" for every object, and for named objects), for messages.
	selector, user string
	// named: the objects were named; else they are what the first list
	// selects.
	named  bool
	listed bool
}

type tracked struct {
	ref  ObjectRef
	rv   uint64
	done bool
}

// TrackHandler receives what a Tracker sees. Seen and Gone are required,
// and called only for objects not Done.
type TrackHandler struct {
	// Seen passes the latest state of an object: never one older than the
	// state passed before.
	Seen func(ref ObjectRef, obj schema.Object)
	// Gone says an object does not exist: initially, at the first list of
	// its kind; otherwise, it was deleted (or relabelled out of the
	// selector and then deleted) while tracked. An error ends Run.
	Gone func(ref ObjectRef, initially bool) error
	// Lost says the hub could not be reached (a watch ended, a re-read
	// failed) and the Tracker keeps trying.
	Lost func(err error)
	// Step is called after each change once every kind has been listed;
	// an error ends Run.
	Step func() error
}

// Track returns a Tracker of the named objects.
func (c *Client) Track(refs []ObjectRef) *Tracker {
	t := c.newTracker()
	for _, r := range refs {
		if t.byRef[r] != nil {
			continue
		}
		t.add(r)
		if t.group(r.Kind) == nil {
			t.groups = append(t.groups, &trackGroup{kind: r.Kind, named: true})
		}
	}
	// One device: its watch and lists carry only it.
	for _, g := range t.groups {
		if names := t.names(g); g.kind == Devices && len(names) == 1 {
			g.selector = schema.LabelDevice + "=" + names[0]
		}
	}
	return t
}

// TrackSelected returns a Tracker of the objects of kind that selector
// ("" for all) matches at its first list; Run fails when there are none.
func (c *Client) TrackSelected(kind Kind, selector string) *Tracker {
	t := c.newTracker()
	t.groups = []*trackGroup{{kind: kind, selector: selector, user: selector}}
	return t
}

func (c *Client) newTracker() *Tracker {
	return &Tracker{c: c, Retry: time.Second, byRef: map[ObjectRef]*tracked{}}
}

func (t *Tracker) group(k Kind) *trackGroup {
	for _, g := range t.groups {
		if g.kind == k {
			return g
		}
	}
	return nil
}

func (t *Tracker) names(g *trackGroup) []string {
	var names []string
	for _, o := range t.objs {
		if o.ref.Kind == g.kind {
			names = append(names, o.ref.Name)
		}
	}
	return names
}

func (t *Tracker) add(r ObjectRef) {
	o := &tracked{ref: r}
	t.objs = append(t.objs, o)
	t.byRef[r] = o
}

// Objects are the objects tracked: in the order given to Track, or for
// TrackSelected, of the first list (none before it).
func (t *Tracker) Objects() []ObjectRef {
	refs := make([]ObjectRef, len(t.objs))
	for i, o := range t.objs {
		refs[i] = o.ref
	}
	return refs
}

// Done says the caller needs no more of an object: it is no longer passed
// to the handler nor re-read. Run ends once every object is done.
func (t *Tracker) Done(r ObjectRef) {
	if o := t.byRef[r]; o != nil {
		o.done = true
	}
}

// Started reports whether every kind has been listed.
func (t *Tracker) Started() bool {
	return !slices.ContainsFunc(t.groups, func(g *trackGroup) bool { return !g.listed })
}

func (t *Tracker) finished() bool {
	return !slices.ContainsFunc(t.objs, func(o *tracked) bool { return !o.done })
}

// trackUpdate is what a group's follow passes to Run's loop.
type trackUpdate struct {
	group  *trackGroup
	list   []schema.Object
	isList bool
	ev     Event
	err    error // the follow ended for good
	lost   error // the follow ended and is being started again
}

// Run follows every kind until every object is done (nil), ctx ends (its
// error), the hub refuses a request or a handler fails. A hub that never
// answered ends it too.
func (t *Tracker) Run(ctx context.Context, h TrackHandler) error {
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	updates := make(chan trackUpdate)
	send := func(u trackUpdate) error {
		select {
		case updates <- u:
			return nil
		case <-fctx.Done():
			return fctx.Err()
		}
	}
	for _, g := range t.groups {
		wg.Go(func() { t.follow(fctx, g, send) })
	}
	var tick <-chan time.Time
	if t.Resync > 0 {
		ticker := time.NewTicker(t.Resync)
		defer ticker.Stop()
		tick = ticker.C
	}
	for {
		var err error
		select {
		case u := <-updates:
			err = t.apply(ctx, u, h)
		case <-tick:
			err = t.resync(ctx, h)
		case <-ctx.Done():
			return ctx.Err()
		}
		if t.Started() && h.Step != nil {
			if serr := h.Step(); err == nil && !t.finished() {
				err = serr
			}
		}
		switch {
		case err != nil:
			return err
		case t.Started() && t.finished():
			return nil
		}
	}
}

// follow passes what the group's Follow sees to send. When Follow gives up
// on a hub that stays unreachable, follow starts again after a pause, until
// ctx ends. A hub that never answered, or that refuses, ends the tracking.
func (t *Tracker) follow(ctx context.Context, g *trackGroup, send func(trackUpdate) error) {
	listed := false
	for {
		err := t.c.Follow(ctx, g.kind, g.selector, FollowHandler{
			List: func(objs []schema.Object) error {
				listed = true
				return send(trackUpdate{group: g, list: objs, isList: true})
			},
			Event: func(ev Event) error { return send(trackUpdate{group: g, ev: ev}) },
		})
		if ctx.Err() != nil || !listed || refused(err) {
			send(trackUpdate{group: g, err: err})
			return
		}
		if send(trackUpdate{group: g, lost: err}) != nil {
			return
		}
		if sleepCtx(ctx, t.Retry) != nil {
			return
		}
	}
}

func (t *Tracker) apply(ctx context.Context, u trackUpdate, h TrackHandler) error {
	g := u.group
	switch {
	case u.err != nil:
		return u.err
	case u.lost != nil:
		t.lost(fmt.Errorf("watch %s: %w", g.kind, u.lost), h)
		return nil
	case u.isList:
		return t.list(ctx, g, u.list, h)
	}
	o := t.byRef[ObjectRef{g.kind, u.ev.Object.GetMetadata().Name}]
	if o == nil || o.done {
		return nil
	}
	if u.ev.Type == schema.WatchDeleted {
		// Deleted, or (with a selector) relabelled out of it.
		return t.confirm(ctx, o, h)
	}
	t.seen(o, u.ev.Object, h)
	return nil
}

// list takes a full list of a group's objects: the first one decides which
// objects a selector means.
func (t *Tracker) list(ctx context.Context, g *trackGroup, objs []schema.Object, h TrackHandler) error {
	first := !g.listed
	g.listed = true
	byName := map[string]schema.Object{}
	for _, obj := range objs {
		name := obj.GetMetadata().Name
		byName[name] = obj
		if first && !g.named {
			t.add(ObjectRef{g.kind, name})
		}
	}
	if first && !g.named && len(objs) == 0 {
		if g.user == "" {
			return fmt.Errorf("no %s found", g.kind)
		}
		return fmt.Errorf("no %s match the selector %s", g.kind, g.user)
	}
	for _, o := range t.objs {
		if o.ref.Kind != g.kind || o.done {
			continue
		}
		if obj, ok := byName[o.ref.Name]; ok {
			t.seen(o, obj, h)
			continue
		}
		if first {
			if err := h.Gone(o.ref, true); err != nil {
				return err
			}
			continue
		}
		if err := t.confirm(ctx, o, h); err != nil {
			return err
		}
	}
	return nil
}

// confirm reads an object the watch says is gone: it may only have stopped
// matching the selector.
func (t *Tracker) confirm(ctx context.Context, o *tracked, h TrackHandler) error {
	obj, err := t.c.Get(ctx, o.ref.Kind, o.ref.Name)
	switch {
	case IsNotFound(err):
		return h.Gone(o.ref, false)
	case err != nil:
		return err
	}
	t.seen(o, obj, h)
	return nil
}

// seen passes the latest state of an object on, unless it is older than
// what was passed before (a re-read racing the watch).
func (t *Tracker) seen(o *tracked, obj schema.Object, h TrackHandler) {
	if o.done {
		return
	}
	rv, _ := strconv.ParseUint(obj.GetMetadata().ResourceVersion, 10, 64)
	if rv < o.rv {
		return
	}
	o.rv = rv
	h.Seen(o.ref, obj)
}

// resync re-reads the objects not done yet, since their status changes
// are not watch events.
func (t *Tracker) resync(ctx context.Context, h TrackHandler) error {
	if !t.Started() {
		return nil
	}
	for _, g := range t.groups {
		var pending []*tracked
		for _, o := range t.objs {
			if o.ref.Kind == g.kind && !o.done {
				pending = append(pending, o)
			}
		}
		if len(pending) > trackListAbove {
			objs, _, err := t.c.List(ctx, g.kind, g.selector)
			if err != nil {
				if err := t.resyncFailed(ctx, err, h); err != nil {
					return err
				}
				continue
			}
			byName := map[string]schema.Object{}
			for _, obj := range objs {
				byName[obj.GetMetadata().Name] = obj
			}
			// The ones the list lacks are read one by one: deleted,
			// or relabelled out of the selector.
			pending = slices.DeleteFunc(pending, func(o *tracked) bool {
				obj, ok := byName[o.ref.Name]
				if ok {
					t.seen(o, obj, h)
				}
				return ok
			})
		}
		for _, o := range pending {
			obj, err := t.c.Get(ctx, o.ref.Kind, o.ref.Name)
			switch {
			case IsNotFound(err):
				if err := h.Gone(o.ref, false); err != nil {
					return err
				}
			case err != nil:
				if err := t.resyncFailed(ctx, err, h); err != nil {
					return err
				}
			default:
				t.seen(o, obj, h)
			}
		}
	}
	return nil
}

// resyncFailed lets a resync carry on after a failed request (a hub
// restarting, a dropped connection: the next one may work). A refusal of
// the hub (a token it no longer accepts, say) ends the tracking.
func (t *Tracker) resyncFailed(ctx context.Context, err error, h TrackHandler) error {
	if ctx.Err() != nil || refused(err) {
		return err
	}
	t.lost(err, h)
	return nil
}

func (t *Tracker) lost(err error, h TrackHandler) {
	if h.Lost != nil {
		h.Lost(err)
	}
}

// refused reports whether err is the hub's answer to a request it will
// never accept (4xx); a 5xx, such as the 503 of a hub shutting down, may
// pass.
func refused(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status.Code < 500
}
