package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/printers"
	"github.com/fleetmq/fleet/schema"
)

// waitResync is how often wait re-reads the objects whose condition is not
// met yet. The hub's watch streams writes of objects (creation, deletion,
// spec and label changes), but a status change (a device coming online, a
// pod becoming ready, a deployment's counts) is not a write and sends no
// event (hub/API.md), so the watch alone would miss it.
var waitResync = rolloutPoll

// waitListAbove is the number of unmet objects of one group above which a
// resync lists them instead of reading them one by one.
const waitListAbove = 5

const defaultWaitTimeout = 30 * time.Second

type waitOptions struct {
	forCond  string
	selector string
	all      bool
	timeout  time.Duration
}

func newWaitCmd(cli *cliContext) *cobra.Command {
	var o waitOptions
	cmd := &cobra.Command{
		Use:   "wait (TYPE/NAME... | TYPE NAME... | TYPE -l key=value | TYPE --all) --for=condition=COND [--timeout=30s]",
		Short: "Wait until deployments or devices meet a condition",
		Long: `Wait until every named object meets a condition, then exit 0; print
"KIND/NAME condition met" for each as it does, as kubectl wait does.

--for takes one of:
  condition=Online       a device is online and not stale (devices)
  condition=Converged    a device runs its latest desired state: it has
                         applied the latest generation and every pod is ready
                         (or done, for pods that are not restarted) (devices)
  condition=Available    a deployment runs its current pod, ready, on every
  condition=Complete     device it targets: what "fleet rollout status" waits
                         for; the two names are the same condition
                         (deployments)
  condition=NAME=false   the opposite: e.g. condition=Online=false waits
                         until a device is offline
  delete                 the object is gone (one that never existed is gone)
  jsonpath='{.path}'=VALUE  a field of the object as -o json shows it has that
                         value, e.g. jsonpath='{.status.observedGeneration}'=4;
                         without =VALUE, the field is set. Paths are dotted
                         field names and [N] list indexes.

Condition names are case-insensitive. To follow an apply, wait for the
deployment (condition=Available): it knows which generation is current, while
a device may still look converged on its previous desired state for a moment
after the apply.

With -l (or --all), wait waits for the
objects the selector matches when it starts, and fails when there are none.
A named object that does not exist is an error (except for --for=delete); one
deleted during the wait fails it.

--timeout bounds the whole wait (default 30s; 0 checks once; a negative value
waits as long as it takes). When it expires, wait exits 1 and names every
object whose condition was not met, and why. wait follows the hub's watch,
reconnecting as needed, and re-reads the status of the objects still waited
for every second (a status change is not a watch event).`,
		Example: `  # Wait for a device to come online after "fleet device add"
  fleet wait device/pi-1 --for=condition=Online --timeout=10m

  # Every lab device online, then every one running all it should
  fleet wait devices -l site=lab --for=condition=Online
  fleet wait devices -l site=lab --for=condition=Converged --timeout=5m

  # Apply, then wait until the deployment runs on all its devices
  fleet apply -f web.yaml && fleet wait deployment/web --for=condition=Available --timeout=5m

  # Gone
  fleet delete deployment web && fleet wait deployment/web --for=delete

  # A field of the object
  fleet wait device/pi-1 --for=jsonpath='{.status.agent.version}'=v0.4.0`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: cli.completeResources,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runWait(cmd.Context(), cli, args, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.forCond, "for", "", "what to wait for: condition=NAME[=true|false], delete, or jsonpath='{.path}'=VALUE")
	f.StringVarP(&o.selector, "selector", "l", "", "wait for the objects this label selector matches, as fleet get -l does (site=lab,fleet/arch=arm64)")
	f.BoolVar(&o.all, "all", false, "wait for every object of the type")
	// Shadows the global --timeout (each request's limit), as kubectl's
	// wait --timeout does its --request-timeout.
	f.DurationVar(&o.timeout, "timeout", defaultWaitTimeout, "how long to wait in all (0: check once; negative: no limit); each request still has the default limit of "+defaultTimeout.String())
	must(cmd.RegisterFlagCompletionFunc("for", cobra.FixedCompletions([]string{
		"condition=Online", "condition=Converged", "condition=Available", "condition=Complete", "delete", "jsonpath=",
	}, cobra.ShellCompDirectiveNoFileComp|cobra.ShellCompDirectiveNoSpace)))
	return cmd
}

func runWait(ctx context.Context, cli *cliContext, args []string, o waitOptions) error {
	w, err := newWaiter(cli, args, o)
	if err != nil {
		return err
	}
	if w.cl, err = cli.Client(); err != nil {
		return err
	}
	wait := ctx
	if o.timeout == 0 {
		// Check once: as long as a request may take.
		w.timeout = cli.timeout
	}
	if w.timeout > 0 {
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeout(ctx, w.timeout)
		defer cancel()
	}
	err = w.run(wait)
	if err != nil && ctx.Err() != nil {
		return &exitError{code: 130} // interrupted: the user stopped waiting
	}
	return err
}

// ---- conditions ----------------------------------------------------------------

// checkFunc says whether an object meets a condition and, if not, why not.
type checkFunc func(obj schema.Object, now time.Time) (met bool, why string)

// waitCondition is what --for asks of every object.
type waitCondition struct {
	// text is the condition as messages name it: "condition=Online".
	text string
	// deletion: the object must be gone; check is nil.
	deletion bool
	check    map[client.Kind]checkFunc
}

// namedCondition is one condition=NAME of one kind.
type namedCondition struct {
	name  string
	kind  client.Kind
	check checkFunc
}

var waitConditions = []namedCondition{
	{"Online", client.Devices, deviceOnline},
	{"Converged", client.Devices, deviceConverged},
	{"Available", client.Deployments, deploymentRolledOut},
	{"Complete", client.Deployments, deploymentRolledOut},
}

const forUsage = "want condition=NAME[=true|false], delete or jsonpath='{.path}'=VALUE"

// parseWaitFor reads --for for objects of kinds.
func parseWaitFor(s string, kinds []client.Kind) (waitCondition, error) {
	typ, rest, _ := strings.Cut(s, "=")
	switch strings.ToLower(typ) {
	case "delete":
		if rest != "" {
			return waitCondition{}, fmt.Errorf("--for %q: delete takes no value", s)
		}
		return waitCondition{text: "delete", deletion: true}, nil
	case "condition":
		return parseConditionFor(s, rest, kinds)
	case "jsonpath":
		return parseJSONPathFor(s, rest, kinds)
	}
	return waitCondition{}, fmt.Errorf("--for %q: %s", s, forUsage)
}

func parseConditionFor(s, rest string, kinds []client.Kind) (waitCondition, error) {
	name, value, hasValue := strings.Cut(rest, "=")
	want := true
	if hasValue {
		b, err := strconv.ParseBool(value)
		if err != nil {
			return waitCondition{}, fmt.Errorf("--for %q: the value of a condition is true or false", s)
		}
		want = b
	}
	if name == "" {
		return waitCondition{}, fmt.Errorf("--for %q: name the condition, e.g. condition=Online", s)
	}
	c := waitCondition{check: map[client.Kind]checkFunc{}}
	for _, k := range kinds {
		i := slices.IndexFunc(waitConditions, func(nc namedCondition) bool { return nc.kind == k && strings.EqualFold(nc.name, name) })
		if i < 0 {
			var names []string
			for _, nc := range waitConditions {
				if nc.kind == k {
					names = append(names, nc.name)
				}
			}
			return waitCondition{}, fmt.Errorf("--for %q: %s have no condition %q; theirs are %s", s, k, name, strings.Join(names, ", "))
		}
		nc := waitConditions[i]
		c.text = "condition=" + nc.name
		check := nc.check
		if !want {
			c.text += "=false"
			check = func(obj schema.Object, now time.Time) (bool, string) {
				if met, _ := nc.check(obj, now); met {
					return false, nc.name + " is still true"
				}
				return true, ""
			}
		}
		c.check[k] = check
	}
	return c, nil
}

func deviceOnline(obj schema.Object, now time.Time) (bool, string) {
	st := obj.(*schema.Device).Status
	switch {
	case st == nil || !st.Online && st.LastSeen == nil:
		return false, "its agent has never reported"
	case st.Stale:
		return false, "stale: nothing heard from it" + lastSeen(st, now)
	case !st.Online:
		return false, "offline" + lastSeen(st, now)
	}
	return true, ""
}

func lastSeen(st *schema.DeviceObservedInfo, now time.Time) string {
	if st.LastSeen == nil {
		return ""
	}
	return ", last seen " + printers.HumanDuration(now.Sub(*st.LastSeen)) + " ago"
}

// deviceConverged is the hub's own verdict (status.converged, computed by
// the controller from the device's report); the reason says what is
// missing.
func deviceConverged(obj schema.Object, now time.Time) (bool, string) {
	d := obj.(*schema.Device)
	st := d.Status
	if st == nil {
		return false, "its agent has never reported"
	}
	if st.Converged {
		return true, ""
	}
	var why string
	if st.ObservedGeneration < st.DesiredGeneration {
		why = fmt.Sprintf("has applied generation %d of %d", st.ObservedGeneration, st.DesiredGeneration)
	} else {
		var pods []string
		for _, p := range printers.PodsOf(d, nil) {
			if !p.Ready && p.Phase != schema.PhaseSucceeded {
				pods = append(pods, fmt.Sprintf("%s (%s)", p.Name, printers.PodStatusText(p)))
			}
		}
		why = "pods not ready: " + strings.Join(pods, ", ")
		if len(pods) == 0 {
			why = "not every pod it should run is reported yet"
		}
	}
	if online, _ := deviceOnline(obj, now); !online {
		why += " (offline" + lastSeen(st, now) + ")"
	}
	return false, why
}

// deploymentRolledOut is "fleet rollout status"'s verdict.
func deploymentRolledOut(obj schema.Object, _ time.Time) (bool, string) {
	d := obj.(*schema.Deployment)
	if _, done := rolloutProgress(d); done {
		return true, ""
	}
	if d.Status == nil || d.Status.ObservedGeneration < d.Metadata.Generation {
		return false, fmt.Sprintf("the hub has not yet observed generation %d", d.Metadata.Generation)
	}
	return false, rolloutShortfall(d)
}

// ---- the wait ------------------------------------------------------------------

// waitTarget is one object waited for.
type waitTarget struct {
	ref  ref
	uid  string
	rv   uint64
	why  string // why the condition is not met, for the timeout message
	done bool
	// printed: "condition met" was printed. Those met by the first
	// lists are printed together, in the order of the arguments.
	printed bool
}

// waitGroup is the objects of one kind, followed by one watch.
type waitGroup struct {
	kind client.Kind
	// selector is what the watch selects; user is the user's -l (or
	// "" for --all and for named objects), for messages.
	selector, user string
	// named: the targets were named; else they are what the first list
	// selects.
	named  bool
	listed bool
}

// waitUpdate is what a group's watch passes to the wait's loop.
type waitUpdate struct {
	group  *waitGroup
	list   []schema.Object
	isList bool
	ev     client.Event
	err    error // the watch ended for good
	lost   error // the watch ended and is being opened again
}

// waiter waits for one set of objects. Only run's goroutine touches it.
type waiter struct {
	cli     *cliContext
	cl      *client.Client
	cond    waitCondition
	timeout time.Duration
	once    bool // --timeout=0: check once
	groups  []*waitGroup
	targets []*waitTarget // in the order of the arguments, or of the first list
	byRef   map[ref]*waitTarget
	// warned: a request or the watch failed, and the user was told.
	warned bool
}

func newWaiter(cli *cliContext, args []string, o waitOptions) (*waiter, error) {
	kind, refs, err := parseRefs(args)
	if err != nil {
		return nil, err
	}
	if err := checkSelector(o.selector); err != nil {
		return nil, err
	}
	w := &waiter{cli: cli, timeout: o.timeout, once: o.timeout == 0, byRef: map[ref]*waitTarget{}}
	switch {
	case len(refs) > 0 && (o.selector != "" || o.all):
		return nil, errors.New("name objects, or select them with -l or --all, not both")
	case len(refs) == 0 && o.selector != "" && o.all:
		return nil, errors.New("-l and --all cannot be combined")
	case len(refs) == 0 && o.selector == "" && !o.all:
		return nil, fmt.Errorf("name the %s to wait for, or select them with -l key=value or --all", kind)
	case len(refs) == 0:
		sel := strings.TrimSpace(o.selector)
		w.groups = []*waitGroup{{kind: kind, selector: sel, user: sel}}
	default:
		for _, r := range refs {
			if w.byRef[r] != nil {
				continue
			}
			w.add(r)
			if g := w.group(r.kind); g == nil {
				w.groups = append(w.groups, &waitGroup{kind: r.kind, named: true})
			}
		}
		// One device: its watch and lists carry only it.
		for _, g := range w.groups {
			if names := w.names(g); g.kind == client.Devices && len(names) == 1 {
				g.selector = schema.LabelDevice + "=" + names[0]
			}
		}
	}
	kinds := make([]client.Kind, len(w.groups))
	for i, g := range w.groups {
		kinds[i] = g.kind
	}
	if o.forCond == "" {
		return nil, fmt.Errorf("--for is required: %s", forUsage)
	}
	if w.cond, err = parseWaitFor(o.forCond, kinds); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *waiter) group(k client.Kind) *waitGroup {
	for _, g := range w.groups {
		if g.kind == k {
			return g
		}
	}
	return nil
}

func (w *waiter) names(g *waitGroup) []string {
	var names []string
	for _, t := range w.targets {
		if t.ref.kind == g.kind {
			names = append(names, t.ref.name)
		}
	}
	return names
}

func (w *waiter) add(r ref) {
	t := &waitTarget{ref: r}
	w.targets = append(w.targets, t)
	w.byRef[r] = t
}

// run follows every group until every target is done, ctx ends or one
// target can no longer meet the condition.
func (w *waiter) run(ctx context.Context) error {
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	updates := make(chan waitUpdate)
	send := func(u waitUpdate) error {
		select {
		case updates <- u:
			return nil
		case <-fctx.Done():
			return fctx.Err()
		}
	}
	for _, g := range w.groups {
		wg.Go(func() { w.follow(fctx, g, send) })
	}
	tick := time.NewTicker(waitResync)
	defer tick.Stop()
	for {
		var err error
		select {
		case u := <-updates:
			err = w.apply(ctx, u)
		case <-tick.C:
			err = w.resync(ctx)
		case <-ctx.Done():
			return w.notMet(ctx)
		}
		if w.started() {
			w.print()
		}
		switch {
		case err != nil && ctx.Err() != nil:
			// The wait ended during a request.
			return w.notMet(ctx)
		case err != nil:
			return err
		case !w.started():
		case w.finished():
			return nil
		case w.once:
			return w.notMet(ctx)
		}
	}
}

// follow passes what the group's watch sees to send. Client.Follow
// reconnects by itself; when it gives up on a hub that stays unreachable
// (restarting, say), follow starts again, until the wait ends. A hub that
// never answered, or that refuses, ends the wait.
func (w *waiter) follow(ctx context.Context, g *waitGroup, send func(waitUpdate) error) {
	listed := false
	for {
		err := w.cl.Follow(ctx, g.kind, g.selector, client.FollowHandler{
			List: func(objs []schema.Object) error {
				listed = true
				return send(waitUpdate{group: g, list: objs, isList: true})
			},
			Event: func(ev client.Event) error { return send(waitUpdate{group: g, ev: ev}) },
		})
		if ctx.Err() != nil || !listed || refused(err) {
			send(waitUpdate{group: g, err: err})
			return
		}
		if send(waitUpdate{group: g, lost: err}) != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(waitResync):
		}
	}
}

func (w *waiter) started() bool {
	return !slices.ContainsFunc(w.groups, func(g *waitGroup) bool { return !g.listed })
}

func (w *waiter) finished() bool {
	return !slices.ContainsFunc(w.targets, func(t *waitTarget) bool { return !t.done })
}

func (w *waiter) apply(ctx context.Context, u waitUpdate) error {
	g := u.group
	switch {
	case u.err != nil:
		return u.err
	case u.lost != nil:
		w.warn(fmt.Errorf("watch %s: %w", g.kind, u.lost))
		return nil
	case u.isList:
		return w.list(ctx, g, u.list)
	}
	t := w.byRef[ref{g.kind, u.ev.Object.GetMetadata().Name}]
	if t == nil || t.done {
		return nil
	}
	if u.ev.Type == schema.WatchDeleted {
		// Deleted, or (with a selector) relabelled out of it.
		return w.confirm(ctx, t)
	}
	w.observe(t, u.ev.Object)
	return nil
}

// list takes a full list of a group's objects: the first one decides which
// objects a selector means.
func (w *waiter) list(ctx context.Context, g *waitGroup, objs []schema.Object) error {
	first := !g.listed
	g.listed = true
	byName := map[string]schema.Object{}
	for _, o := range objs {
		name := o.GetMetadata().Name
		byName[name] = o
		if first && !g.named {
			w.add(ref{g.kind, name})
		}
	}
	if first && !g.named && len(objs) == 0 {
		if g.user == "" {
			return fmt.Errorf("no %s found", g.kind)
		}
		return fmt.Errorf("no %s match the selector %s", g.kind, g.user)
	}
	for _, t := range w.targets {
		if t.ref.kind != g.kind || t.done {
			continue
		}
		if o, ok := byName[t.ref.name]; ok {
			w.observe(t, o)
			continue
		}
		if first {
			if err := w.gone(t, true); err != nil {
				return err
			}
			continue
		}
		if err := w.confirm(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

// confirm reads a target the watch says is gone: it may only have stopped
// matching the selector.
func (w *waiter) confirm(ctx context.Context, t *waitTarget) error {
	o, err := w.cl.Get(ctx, t.ref.kind, t.ref.name)
	switch {
	case client.IsNotFound(err):
		return w.gone(t, false)
	case err != nil:
		return err
	}
	w.observe(t, o)
	return nil
}

// observe takes the latest state of a target.
func (w *waiter) observe(t *waitTarget, o schema.Object) {
	if t.done {
		return
	}
	md := o.GetMetadata()
	rv, _ := strconv.ParseUint(md.ResourceVersion, 10, 64)
	if rv < t.rv {
		return // older than what was seen: a resync racing the watch
	}
	t.rv = rv
	if t.uid == "" {
		t.uid = md.UID
	}
	if w.cond.deletion {
		if md.UID != t.uid {
			// Deleted and created again: the object waited for is gone.
			w.met(t)
		}
		t.why = "still exists"
		return
	}
	met, why := w.cond.check[t.ref.kind](o, w.cli.now())
	if met {
		w.met(t)
	}
	t.why = why
}

// gone handles a target that does not exist: the condition of a deletion,
// the failure of any other.
func (w *waiter) gone(t *waitTarget, initially bool) error {
	switch {
	case w.cond.deletion:
		w.met(t)
		return nil
	case initially:
		return fmt.Errorf("%s %q not found", singular(t.ref.kind), t.ref.name)
	}
	return fmt.Errorf("%s was deleted while waiting for %s", t.ref, w.cond.text)
}

func (w *waiter) met(t *waitTarget) { t.done = true }

// print prints the targets met since the last call, as kubectl does:
// "device/pi-1 condition met".
func (w *waiter) print() {
	for _, t := range w.targets {
		if t.done && !t.printed {
			fmt.Fprintf(w.cli.stdout(), "%s condition met\n", t.ref)
			t.printed = true
		}
	}
}

// resync re-reads the targets not done yet, since their status changes
// are not watch events. A deletion needs none: it is one.
func (w *waiter) resync(ctx context.Context) error {
	if !w.started() || w.cond.deletion {
		return nil
	}
	for _, g := range w.groups {
		var pending []*waitTarget
		for _, t := range w.targets {
			if t.ref.kind == g.kind && !t.done {
				pending = append(pending, t)
			}
		}
		if len(pending) > waitListAbove {
			objs, _, err := w.cl.List(ctx, g.kind, g.selector)
			if err != nil {
				if err := w.resyncFailed(ctx, err); err != nil {
					return err
				}
				continue
			}
			byName := map[string]schema.Object{}
			for _, o := range objs {
				byName[o.GetMetadata().Name] = o
			}
			// The ones the list lacks are read one by one: deleted,
			// or relabelled out of the selector.
			pending = slices.DeleteFunc(pending, func(t *waitTarget) bool {
				o, ok := byName[t.ref.name]
				if ok {
					w.observe(t, o)
				}
				return ok
			})
		}
		for _, t := range pending {
			o, err := w.cl.Get(ctx, t.ref.kind, t.ref.name)
			switch {
			case client.IsNotFound(err):
				if err := w.gone(t, false); err != nil {
					return err
				}
			case err != nil:
				if err := w.resyncFailed(ctx, err); err != nil {
					return err
				}
			default:
				w.observe(t, o)
			}
		}
	}
	return nil
}

// resyncFailed lets a resync carry on after a failed request (a hub
// restarting, a dropped connection: the next one may work), and says so
// once. A refusal of the hub (a token it no longer accepts, say) ends the
// wait.
func (w *waiter) resyncFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil || refused(err) {
		return err
	}
	w.warn(err)
	return nil
}

// refused reports whether err is the hub's answer to a request it will
// never accept (4xx); a 5xx, such as the 503 of a hub shutting down, may
// pass.
func refused(err error) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Status.Code < 500
}

// warn says once that the hub cannot be reached and wait keeps trying.
func (w *waiter) warn(err error) {
	if !w.warned {
		fmt.Fprintf(w.cli.stderr(), "warning: cannot reach the hub, retrying until the timeout: %v\n", err)
		w.warned = true
	}
}

// notMet is the error of a wait that ended with targets not done: one line
// per target, with why.
func (w *waiter) notMet(ctx context.Context) error {
	if !w.started() {
		if err := context.Cause(ctx); !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return fmt.Errorf("timed out after %s before the hub answered", w.timeout)
	}
	w.print()
	var errs []error
	for _, t := range w.targets {
		if t.done {
			continue
		}
		msg := fmt.Sprintf("timed out after %s waiting for %s on %s", w.timeout, w.cond.text, t.ref)
		if w.once {
			msg = fmt.Sprintf("%s is not met on %s", w.cond.text, t.ref)
		}
		if t.why != "" {
			msg += ": " + t.why
		}
		errs = append(errs, errors.New(msg))
	}
	if len(errs) == 0 {
		return nil
	}
	return errors.Join(errs...)
}

// ---- jsonpath ------------------------------------------------------------------

// pathStep is one step of a field path: a field name, or a list index
// (key "").
type pathStep struct {
	key   string
	index int
}

func parseJSONPathFor(s, rest string, kinds []client.Kind) (waitCondition, error) {
	expr, value, hasValue := rest, "", false
	if strings.HasPrefix(rest, "{") {
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return waitCondition{}, fmt.Errorf("--for %q: no } closes the path", s)
		}
		expr = rest[1:end]
		if after := rest[end+1:]; after != "" {
			if !strings.HasPrefix(after, "=") {
				return waitCondition{}, fmt.Errorf("--for %q: want jsonpath='{.path}'=VALUE", s)
			}
			value, hasValue = after[1:], true
		}
	} else {
		expr, value, hasValue = strings.Cut(rest, "=")
	}
	path, err := parseFieldPath(expr)
	if err != nil {
		return waitCondition{}, fmt.Errorf("--for %q: %w", s, err)
	}
	c := waitCondition{text: "jsonpath={" + expr + "}", check: map[client.Kind]checkFunc{}}
	if hasValue {
		c.text += "=" + value
	}
	check := func(obj schema.Object, _ time.Time) (bool, string) {
		got, ok := lookupPath(obj, path)
		switch {
		case !ok || got == nil:
			return false, expr + " is not set"
		case !hasValue:
			return true, ""
		case jsonText(got) == value:
			return true, ""
		}
		return false, fmt.Sprintf("%s is %s", expr, jsonText(got))
	}
	for _, k := range kinds {
		c.check[k] = check
	}
	return c, nil
}

// parseFieldPath reads a path such as .status.pods[0].ready; a dot in a
// field name is written \. (.metadata.labels.example\.com/tier).
func parseFieldPath(expr string) ([]pathStep, error) {
	var steps []pathStep
	for i := 0; i < len(expr); {
		switch expr[i] {
		case '.':
			i++
			var b strings.Builder
			for i < len(expr) && expr[i] != '.' && expr[i] != '[' {
				if expr[i] == '\\' && i+1 < len(expr) {
					i++
				}
				b.WriteByte(expr[i])
				i++
			}
			if b.Len() == 0 {
				return nil, fmt.Errorf("path %q: a field name is empty", expr)
			}
			steps = append(steps, pathStep{key: b.String()})
		case '[':
			end := strings.IndexByte(expr[i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("path %q: no ] closes the index", expr)
			}
			n, err := strconv.Atoi(expr[i+1 : i+end])
			if err != nil || n < 0 {
				return nil, fmt.Errorf("path %q: an index is a number, such as [0]", expr)
			}
			steps = append(steps, pathStep{index: n})
			i += end + 1
		default:
			return nil, fmt.Errorf("path %q: want dotted field names, such as .status.online", expr)
		}
	}
	if len(steps) == 0 {
		return nil, errors.New("the path is empty: want one such as .status.online")
	}
	return steps, nil
}

// lookupPath returns the value at path in obj as -o json shows it.
func lookupPath(obj schema.Object, path []pathStep) (any, bool) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil, false
	}
	for _, st := range path {
		switch cur := v.(type) {
		case map[string]any:
			next, ok := cur[st.key]
			if st.key == "" || !ok {
				return nil, false
			}
			v = next
		case []any:
			if st.key != "" || st.index >= len(cur) {
				return nil, false
			}
			v = cur[st.index]
		default:
			return nil, false
		}
	}
	return v, true
}

// jsonText is a JSON value as a --for value is written: a string without
// quotes, a number or boolean as such, anything else as JSON.
func jsonText(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	}
	b, _ := json.Marshal(v)
	return string(b)
}
