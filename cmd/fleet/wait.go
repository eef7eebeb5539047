package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

// waitResync is how often wait re-reads the objects whose condition is not
// met yet. The hub's watch streams writes of objects (creation, deletion,
// spec and label changes), but a status change (a device coming online, a
// pod becoming ready, a deployment's counts) is not a write and sends no
// event (hub/API.md), so the watch alone would miss it.
var waitResync = rolloutPoll

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
	cl, err := cli.Client()
	if err != nil {
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
	err = w.run(wait, cl)
	if err != nil && ctx.Err() != nil {
		return &exitError{code: 130} // interrupted: the user stopped waiting
	}
	return err
}

// waitTarget is what wait knows of one object beyond what the tracker does.
type waitTarget struct {
	uid  string
	why  string // why the condition is not met, for the timeout message
	done bool
	// printed: "condition met" was printed. Those met by the first
	// lists are printed together, in the order of the arguments.
	printed bool
}

// waiter waits for one set of objects, which a client.Tracker follows.
// Only the tracker's goroutine touches it.
type waiter struct {
	cli     *cliContext
	cond    waitCondition
	timeout time.Duration
	once    bool // --timeout=0: check once
	// named are the objects named, in the order of the arguments; else
	// kind and selector select them.
	named    []client.ObjectRef
	kind     client.Kind
	selector string
	tr       *client.Tracker
	targets  map[client.ObjectRef]*waitTarget
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
	w := &waiter{cli: cli, timeout: o.timeout, once: o.timeout == 0, targets: map[client.ObjectRef]*waitTarget{}}
	var kinds []client.Kind
	switch {
	case len(refs) > 0 && (o.selector != "" || o.all):
		return nil, errors.New("name objects, or select them with -l or --all, not both")
	case len(refs) == 0 && o.selector != "" && o.all:
		return nil, errors.New("-l and --all cannot be combined")
	case len(refs) == 0 && o.selector == "" && !o.all:
		return nil, fmt.Errorf("name the %s to wait for, or select them with -l key=value or --all", kind)
	case len(refs) == 0:
		w.kind, w.selector = kind, strings.TrimSpace(o.selector)
		kinds = []client.Kind{kind}
	default:
		for _, r := range refs {
			w.named = append(w.named, client.ObjectRef{Kind: r.kind, Name: r.name})
			if !slices.Contains(kinds, r.kind) {
				kinds = append(kinds, r.kind)
			}
		}
	}
	if o.forCond == "" {
		return nil, fmt.Errorf("--for is required: %s", forUsage)
	}
	if w.cond, err = parseWaitFor(o.forCond, kinds); err != nil {
		return nil, err
	}
	return w, nil
}

// run follows the objects until every one meets the condition, ctx ends or
// one can no longer meet it.
func (w *waiter) run(ctx context.Context, cl *client.Client) error {
	if w.named != nil {
		w.tr = cl.Track(w.named)
	} else {
		w.tr = cl.TrackSelected(w.kind, w.selector)
	}
	w.tr.Retry = waitResync
	if !w.cond.deletion {
		// A deletion needs no re-reads: it is a watch event.
		w.tr.Resync = waitResync
	}
	err := w.tr.Run(ctx, client.TrackHandler{Seen: w.observe, Gone: w.gone, Lost: w.warn, Step: w.step})
	if err != nil && ctx.Err() != nil {
		// The wait ended, during a request or not.
		return w.notMet(ctx)
	}
	return err
}

// step prints the objects met since the last step; with --timeout=0, the
// wait ends at the first, that of the first lists.
func (w *waiter) step() error {
	w.print()
	if w.once {
		return w.notMet(context.Background())
	}
	return nil
}

func (w *waiter) target(r client.ObjectRef) *waitTarget {
	t := w.targets[r]
	if t == nil {
		t = &waitTarget{}
		w.targets[r] = t
	}
	return t
}

// observe takes the latest state of an object.
func (w *waiter) observe(r client.ObjectRef, o schema.Object) {
	t := w.target(r)
	md := o.GetMetadata()
	if t.uid == "" {
		t.uid = md.UID
	}
	if w.cond.deletion {
		if md.UID != t.uid {
			// Deleted and created again: the object waited for is gone.
			w.met(r)
		}
		t.why = "still exists"
		return
	}
	met, why := w.cond.check[r.Kind](o, w.cli.now())
	if met {
		w.met(r)
	}
	t.why = why
}

// gone handles an object that does not exist: the condition of a deletion,
// the failure of any other.
func (w *waiter) gone(r client.ObjectRef, initially bool) error {
	switch {
	case w.cond.deletion:
		w.met(r)
		return nil
	case initially:
		return fmt.Errorf("%s %q not found", singular(r.Kind), r.Name)
	}
	return fmt.Errorf("%s was deleted while waiting for %s", ref{r.Kind, r.Name}, w.cond.text)
}

func (w *waiter) met(r client.ObjectRef) {
	w.target(r).done = true
	w.tr.Done(r)
}

// print prints the objects met since the last call, as kubectl does:
// "device/pi-1 condition met".
func (w *waiter) print() {
	for _, r := range w.tr.Objects() {
		if t := w.target(r); t.done && !t.printed {
			fmt.Fprintf(w.cli.stdout(), "%s condition met\n", ref{r.Kind, r.Name})
			t.printed = true
		}
	}
}

// warn says once that the hub cannot be reached and wait keeps trying.
func (w *waiter) warn(err error) {
	if !w.warned {
		fmt.Fprintf(w.cli.stderr(), "warning: cannot reach the hub, retrying until the timeout: %v\n", err)
		w.warned = true
	}
}

// notMet is the error of a wait that ended with objects not met: one line
// per object, with why.
func (w *waiter) notMet(ctx context.Context) error {
	if !w.tr.Started() {
		if err := context.Cause(ctx); !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return fmt.Errorf("timed out after %s before the hub answered", w.timeout)
	}
	w.print()
	var errs []error
	for _, r := range w.tr.Objects() {
		t := w.target(r)
		if t.done {
			continue
		}
		msg := fmt.Sprintf("timed out after %s waiting for %s on %s", w.timeout, w.cond.text, ref{r.Kind, r.Name})
		if w.once {
			msg = fmt.Sprintf("%s is not met on %s", w.cond.text, ref{r.Kind, r.Name})
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
