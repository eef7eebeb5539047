package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/printers"
	"github.com/fleetmq/fleet/schema"
)

type getOptions struct {
	selector    string
	output      string
	sortBy      string
	watch       bool
	noHeaders   bool
	watchEvents bool
	chunkSize   int
}

// getLong is the help of fleet get.
const getLong = `List deployments, devices, configmaps, secrets or pods, or show the named
ones.

Resource types: deployments (also deployment, deploy), devices (also device,
dev), configmaps (also configmap, cm), secrets (also secret) and pods (also
pod, po). Objects can also be named as KIND/NAME.

Deployments: NAME, TARGETED (devices the selector matches), UPDATED (running
the latest pod), READY, PENDING (offline devices count as pending), GENERATION
(bumped on every spec change) and AGE; -o wide adds SELECTOR, IMAGES and
STRATEGY.

Devices: NAME, ONLINE, LAST-SEEN (last status from the agent), GENERATION
(observed/desired: the agent has applied the latest desired state when they
are equal), PODS (ready/total), CONVERGED and AGE; -o wide adds LABELS, ARCH
and AGENT. A device whose agent never reported shows false, <never> and 0/0.

ConfigMaps: NAME, DATA (number of keys) and AGE; -o wide adds KEYS and
LABELS.

Secrets: NAME, TYPE, DATA (number of keys) and AGE; -o wide adds KEYS and
LABELS. The hub never returns a secret's values: -o json and -o yaml show
its keys with the size of each value (keys: {token: 12}). A monitor
credential may not read secrets at all.

AgentRollouts: NAME, VERSION, PHASE, STEP, UPDATED (given the version/
targeted), FAILED, PENDING and AGE; -o wide adds SELECTOR, STRATEGY,
LAST-GOOD and IMAGE ("fleet agent status" shows them device by device).

Hubs (also hub): the hubs of the fleet, the leader first: ID, LEADER, API,
BROKER (the embedded broker devices use: only the leader's accepts them),
LEASE-TTL, LEASE-LEFT (what remains of the hub's etcd lease before it
renews it) and AGE; -o wide adds VERSION, LEASE and STARTED. On Badger the
one hub, always the leader. See README "Running several hubs".

Pods: one line per pod per device, as the devices last reported them:
DEVICE, POD (the deployment's name), READY (ready containers/total),
STATUS (the reason of the first container not running, such as
ErrImagePull, CrashLoopBackOff or ContainerCreating, else the pod's phase;
Unknown, and READY 0/N, when the device is offline or silent), RESTARTS
and AGE (since its containers started); -o wide adds IMAGES (those that
run), FAILED REVISION (a desired revision the device went back from
because it failed to start: "5d1c9a0e (CrashLoopBackOff)") and MESSAGE
(for an unreachable device, first "device offline; last report 42s ago:
Running, 1/1 ready"). NAME keeps the pods
of that name; -l selects devices, e.g. -l fleet/device=pi-1 for one device.

-l takes a label selector as kubectl does: key=value (or key==value),
key!=value (also matches objects without the label), 'key in (a,b)',
'key notin (a,b)', key (the label is set) and !key (it is not), joined by
commas, all of which must hold. Quote it for the shell.

Output formats (-o):
  table, wide     the columns above
  name            KIND/NAME per line (pod/DEVICE/POD for pods)
  json, yaml      one object for a single NAME, else the list (DeploymentList,
                  DeviceList, ConfigMapList, SecretList) with the
                  resourceVersion it was read at; for
                  pods, always a PodList (items: device, reachable and the
                  pod's status)
  jsonpath=TEMPLATE
                  a JSONPath template over what -o json prints, as kubectl's:
                  text outside {} is printed as is, {range}…{end} loops,
                  {"\n"} is a newline; a missing field prints nothing
  jsonpath-file=FILE
                  the same, with the template read from FILE
  custom-columns=HEADER:PATH[,HEADER:PATH...]
                  a table of these columns, each PATH taken in every item
                  (.metadata.name or {.metadata.name}); <none> where it finds
                  nothing, several values joined by commas

--sort-by=PATH sorts the items of the list by the value at PATH in each, in
every format: numbers by value, text in natural order (pi-2 before pi-10),
items without a value first.

Lists are fetched --chunk-size items at a time (default 500; 0 asks for
everything in one answer), the hub's pages (limit, continue) followed to the
end: a fleet of 100,000 devices is 200 small answers, not one huge one. On a
terminal, a listing of several pages shows its progress on stderr.

-w prints the list, then a line (or a JSON/YAML object, or the template) per
change until interrupted.`

const getExample = `  # All deployments, and all devices with more columns
  fleet get deployments
  fleet get devices -o wide

  # Devices with labels site=lab and arch=arm64
  fleet get dev -l site=lab,fleet/arch=arm64

  # Devices of two sites, devices outside the lab, devices without a gpu label
  fleet get devices -l 'site in (north,south)'
  fleet get devices -l 'site!=lab'
  fleet get devices -l '!gpu'

  # One deployment as YAML
  fleet get deployment web -o yaml

  # Secrets with their types and key counts; one secret's keys and sizes
  fleet get secrets
  fleet get secret registry -o yaml

  # Watch devices come online and converge
  fleet get devices -w

  # Every pod that is not running well, across the fleet
  fleet get pods | grep -v Running

  # The pods of one site, with images and messages, most restarted last
  fleet get pods -l site=lab -o wide --sort-by=.restarts

  # The hubs of the fleet: which one leads, and their leases
  fleet get hubs
  fleet get hubs -o wide

  # Names only, for scripts
  fleet get devices -o name

  # A large fleet, 2,000 devices per request (or everything at once)
  fleet get devices --chunk-size 2000
  fleet get devices --chunk-size 0
  fleet get devices -o jsonpath='{.items[*].metadata.name}'

  # One line per device: name, online, agent version
  fleet get devices -o jsonpath='{range .items[*]}{.metadata.name}{"\t"}{.status.online}{"\t"}{.status.agent.version}{"\n"}{end}'

  # The devices that are online
  fleet get devices -o jsonpath='{.items[?(@.status.online==true)].metadata.name}'

  # Columns of your choice, sorted by the time the devices were last seen
  fleet get devices -o custom-columns=NAME:.metadata.name,SITE:.metadata.labels.site,ARCH:.status.agent.arch --sort-by=.status.lastSeen

  # The images of every deployment
  fleet get deployments -o custom-columns='NAME:.metadata.name,IMAGES:.spec.template.spec.containers[*].image'`

func newGetCmd(cli *cliContext) *cobra.Command {
	var o getOptions
	cmd := &cobra.Command{
		Use:     "get (deployments|devices|configmaps|secrets|pods|hubs) [NAME...] [-l SELECTOR] [-o FORMAT] [--sort-by PATH] [-w]",
		Short:   "List deployments, devices, configmaps, secrets or the pods on devices",
		Long:    getLong,
		Example: getExample,
		Args:    cobra.MinimumNArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if _, ok, _ := podArgs(args); ok {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			kinds, dir := cli.completeResources(cmd, args, toComplete)
			if len(args) == 0 && strings.HasPrefix("pods", toComplete) {
				kinds = append(kinds, "pods")
			}
			return kinds, dir
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runGet(cmd.Context(), cli, args, o)
		},
	}
	addGetFlags(cmd, &o, "only objects")
	return cmd
}

// addGetFlags adds the flags of fleet get (and fleet device list, which is
// fleet get devices); what is what -l selects.
func addGetFlags(cmd *cobra.Command, o *getOptions, what string) {
	f := cmd.Flags()
	f.StringVarP(&o.selector, "selector", "l", "", selectorUsage(what))
	addOutputFlagOf(cmd, &o.output, "", "output format: table (default), wide, json, yaml, name, jsonpath=TEMPLATE, jsonpath-file=FILE or custom-columns=HEADER:PATH,...", true)
	f.StringVar(&o.sortBy, "sort-by", "", "sort the list by the value at this JSONPath in each item, e.g. .metadata.name or '{.status.lastSeen}'")
	f.BoolVarP(&o.watch, "watch", "w", false, "after listing, print every change until interrupted")
	f.BoolVar(&o.noHeaders, "no-headers", false, "leave out the header line of tables")
	f.BoolVar(&o.watchEvents, "output-watch-events", false, "with -w, print the event type (ADDED, MODIFIED, DELETED) of each change")
	f.IntVar(&o.chunkSize, "chunk-size", client.DefaultChunkSize, "fetch lists this many items per request (0: everything in one request)")
}

func runGet(ctx context.Context, cli *cliContext, args []string, o getOptions) error {
	if ids, ok := hubsArgs(args); ok { // hubs.go
		return runGetHubs(ctx, cli, ids, o)
	}
	if names, ok, err := podArgs(args); ok || err != nil {
		if err != nil {
			return err
		}
		return runGetPods(ctx, cli, names, o)
	}
	if k, _, _ := strings.Cut(args[0], "/"); k != "" {
		if _, err := parseKind(k); err != nil {
			if strings.HasPrefix(strings.ToLower(k), "ev") {
				return fmt.Errorf("unknown resource type %q: events are listed with fleet events", k)
			}
			return fmt.Errorf("unknown resource type %q: valid types are %s and pods (pod, po)", k, strings.Replace(validKinds, " and ", ", ", 1))
		}
	}
	kind, refs, err := parseRefs(args)
	if err != nil {
		return err
	}
	if err := checkSelector(o.selector); err != nil {
		return err
	}
	if o.chunkSize < 0 {
		return fmt.Errorf("--chunk-size: %d is negative: want 0 (everything at once) or more", o.chunkSize)
	}
	if o.selector != "" && len(refs) > 0 {
		return errors.New("a NAME and a label selector (-l) cannot be combined")
	}
	p, err := cli.getPrinter(o.output, o.sortBy, o.noHeaders)
	if err != nil {
		return err
	}
	p.WatchEvents = o.watchEvents
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	if o.watch {
		if kind == "" {
			kind = refs[0].kind
			for _, r := range refs {
				if r.kind != kind {
					return errors.New("-w watches one resource type at a time")
				}
			}
		}
		err := watchObjects(ctx, cl, p, kind, refs, o.selector)
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// Interrupted (Ctrl-C): the way a watch ends.
			return nil
		}
		return err
	}
	if len(refs) == 0 {
		objs, rv, err := listInChunks(ctx, cli, cl, kind, o.selector, o.chunkSize)
		if err != nil {
			return err
		}
		if len(objs) == 0 && !p.PrintsEmptyList() {
			fmt.Fprintln(cli.stderr(), "No resources found.")
			return nil
		}
		return p.PrintList(kind, objs, rv)
	}
	return getNamed(ctx, cli, cl, p, refs)
}

// getNamed prints the named objects; the ones that could not be read are
// reported after the others, as kubectl does.
func getNamed(ctx context.Context, cli *cliContext, cl *client.Client, p *printers.Printer, refs []ref) error {
	var errs []error
	var objs []schema.Object
	for _, r := range refs {
		obj, err := cl.Get(ctx, r.kind, r.name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		objs = append(objs, obj)
	}
	var err error
	switch {
	case len(objs) == 0:
	case len(refs) == 1:
		err = p.PrintObject(objs[0])
	default:
		err = p.PrintMixed(objs)
	}
	if err != nil {
		return err
	}
	return errors.Join(errs...)
}

// watchObjects prints the current objects of kind, then every change until
// ctx is done. With refs, only those names are shown.
func watchObjects(ctx context.Context, cl *client.Client, p *printers.Printer, kind client.Kind, refs []ref, selector string) error {
	wanted := func(o schema.Object) bool {
		if len(refs) == 0 {
			return true
		}
		return slices.ContainsFunc(refs, func(r ref) bool { return r.name == o.GetMetadata().Name })
	}
	return cl.Follow(ctx, kind, selector, client.FollowHandler{
		List: func(objs []schema.Object) error {
			return p.StartWatch(kind, slices.DeleteFunc(objs, func(o schema.Object) bool { return !wanted(o) }))
		},
		Event: func(ev client.Event) error {
			if !wanted(ev.Object) {
				return nil
			}
			return p.PrintEvent(ev)
		},
	})
}

// podArgs reads "pods [NAME...]" or "pod/NAME..." arguments: ok is false
// when the arguments name another resource type.
func podArgs(args []string) (names []string, ok bool, err error) {
	isPods := func(k string) bool {
		switch strings.ToLower(k) {
		case "pods", "pod", "po":
			return true
		}
		return false
	}
	if len(args) == 0 {
		return nil, false, nil
	}
	if k, _, slash := strings.Cut(args[0], "/"); !slash {
		if !isPods(args[0]) {
			return nil, false, nil
		}
		for _, name := range args[1:] {
			if strings.Contains(name, "/") {
				return nil, true, fmt.Errorf("there is no need to name the resource type in %q: it is pods", name)
			}
			if err := schema.ValidateName(name); err != nil {
				return nil, true, fmt.Errorf("pod name %w", err)
			}
			names = append(names, name)
		}
		return names, true, nil
	} else if !isPods(k) {
		if slices.ContainsFunc(args, func(a string) bool { k, _, _ := strings.Cut(a, "/"); return isPods(k) }) {
			return nil, true, errors.New("pods cannot be listed together with other resource types")
		}
		return nil, false, nil
	}
	for _, a := range args {
		k, name, ok := strings.Cut(a, "/")
		if !ok || !isPods(k) {
			return nil, true, fmt.Errorf("%q: pods cannot be listed together with other resource types; use pod/NAME for every argument", a)
		}
		if err := schema.ValidateName(name); err != nil {
			return nil, true, fmt.Errorf("%s: name %w", a, err)
		}
		names = append(names, name)
	}
	return names, true, nil
}

// runGetPods lists the pods the selected devices last reported: the hub
// keeps them in each device's status.
func runGetPods(ctx context.Context, cli *cliContext, names []string, o getOptions) error {
	if err := checkSelector(o.selector); err != nil {
		return err
	}
	if o.watchEvents {
		return errors.New("--output-watch-events is not supported for pods")
	}
	p, err := cli.getPrinter(o.output, o.sortBy, o.noHeaders)
	if err != nil {
		return err
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	selector := o.selector
	if o.watch {
		w := p.NewPodWatch(names)
		err := cl.Follow(ctx, client.Devices, selector, client.FollowHandler{
			List: func(objs []schema.Object) error {
				devs := make([]*schema.Device, 0, len(objs))
				for _, obj := range objs {
					if d, ok := obj.(*schema.Device); ok {
						devs = append(devs, d)
					}
				}
				return w.List(devs)
			},
			Event: func(ev client.Event) error {
				d, ok := ev.Object.(*schema.Device)
				if !ok {
					return nil
				}
				return w.Device(d, ev.Type == schema.WatchDeleted)
			},
		})
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil // interrupted (Ctrl-C): the way a watch ends
		}
		return err
	}
	objs, _, err := cl.List(ctx, client.Devices, selector)
	if err != nil {
		return err
	}
	var pods []printers.DevicePod
	for _, obj := range objs {
		if d, ok := obj.(*schema.Device); ok {
			pods = append(pods, printers.PodsOf(d, names)...)
		}
	}
	if len(pods) == 0 && !p.PrintsEmptyList() {
		fmt.Fprintln(cli.stderr(), "No resources found.")
		return nil
	}
	return p.PrintPods(pods)
}
