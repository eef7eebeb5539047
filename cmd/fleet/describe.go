package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/printers"
	"github.com/fleetmq/fleet/schema"
)

func newDescribeCmd(cli *cliContext) *cobra.Command {
	var selector string
	cmd := &cobra.Command{
		Use:   "describe (deployment|device|configmap|secret) [NAME...] [-l key=value,...] | describe pod DEVICE/POD",
		Short: "Show the details of deployments, devices, pods, configmaps or secrets",
		Long: `Show the details of deployments, devices, configmaps or secrets, for people.

A deployment: labels, selector, strategy, the pod template (every container's
image, command, environment, mounts and limits), its status, and the pod on
each device its selector matches.

A device: labels, what its agent last reported (online, last seen, observed
and desired generation, agent version, architecture, memory and disk), the
deployments that target it, each pod with its containers' state, and its
recent events (image pulls, starts, exits, backoffs, errors), oldest first.
The hub keeps the last few events of each device in memory, so after a hub
restart only the ones heard since are shown. When the hub has measured the
device (fleet top), a Resources block shows its last figures.

A pod (pod DEVICE/POD): its status on that device (Status as get pods
says it, the revision that runs, phase, ready, restarts, each container's
image, state, exit code and start; a Failed Revision the device went back
from; for a device offline or silent, Status Unknown with the age of the
last report, the lines below it marked "last reported"), the last crash of each
container ("Last crash: exited 1 at ..." and the last lines of its log, as
the device reported them, kept by the hub even while the device is offline)
and the device's recent events about the pod.

A configmap: labels and its data (text values in full, binary ones by
size). A secret: labels, its type and its keys with the size of each
value; never the values, which the hub does not return.

Without a NAME, every object of the type (matching -l) is described.`,
		Example: `  fleet describe deployment web
  fleet describe device pi-kitchen
  fleet describe pod pi-kitchen/web
  fleet describe secret registry
  fleet describe devices -l site=lab`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: cli.completeResources,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDescribe(cmd.Context(), cli, args, selector)
		},
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", selectorUsage("describe the objects"))
	return cmd
}

func runDescribe(ctx context.Context, cli *cliContext, args []string, selector string) error {
	if pods, ok, err := describePodArgs(args); ok {
		if err != nil {
			return err
		}
		if selector != "" {
			return errors.New("describe pod takes DEVICE/POD arguments, not a label selector (-l)")
		}
		return describePods(ctx, cli, pods)
	}
	kind, refs, err := parseRefs(args)
	if err != nil {
		return err
	}
	if err := checkSelector(selector); err != nil {
		return err
	}
	if selector != "" && len(refs) > 0 {
		return errors.New("a NAME and a label selector (-l) cannot be combined")
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	var objs []schema.Object
	var errs []error
	if len(refs) == 0 {
		objs, _, err = cl.List(ctx, kind, selector)
		if err != nil {
			return err
		}
		if len(objs) == 0 {
			fmt.Fprintln(cli.stderr(), "No resources found.")
			return nil
		}
	}
	for _, r := range refs {
		obj, err := cl.Get(ctx, r.kind, r.name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		objs = append(objs, obj)
	}
	for i, obj := range objs {
		if i > 0 {
			fmt.Fprintln(cli.stdout())
		}
		if err := describe(ctx, cli, cl, obj); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// describe prints one object, with what related objects say about it.
// Failing to read those leaves them out rather than failing the command.
func describe(ctx context.Context, cli *cliContext, cl *client.Client, obj schema.Object) error {
	rctx, cancel := cli.requestContext(ctx)
	defer cancel()
	switch o := obj.(type) {
	case *schema.Deployment:
		var devices []schema.Device
		// The selector's String is the labelSelector query form; an
		// empty one lists every device, as it matches every device.
		if l, err := cl.ListDevices(rctx, o.Spec.Selector.String()); err == nil {
			devices = l.Items
			if devices == nil {
				devices = []schema.Device{}
			}
		}
		return printers.DescribeDeployment(cli.stdout(), o, devices, cli.now())
	case *schema.Device:
		var deps []schema.Deployment
		if l, err := cl.ListDeployments(rctx, ""); err == nil {
			deps = l.Items
			if deps == nil {
				deps = []schema.Deployment{}
			}
		}
		// Events are the hub's memory of what the agent said it did;
		// without them (an older hub) the description ends with the pods.
		events, err := cl.DeviceEvents(rctx, o.Metadata.Name)
		if err != nil {
			events = nil
		} else if events == nil {
			events = []schema.Event{}
		}
		// The last figures of fleet top, when the hub has some; an older
		// hub, a device never measured or one that does not answer in
		// time leaves them out.
		top, err := cl.Top(rctx, o.Metadata.Name)
		if err != nil {
			top = nil
		}
		if top == nil {
			return printers.DescribeDevice(cli.stdout(), o, deps, events, cli.now())
		}
		var b bytes.Buffer
		if err := printers.DescribeDevice(&b, o, deps, events, cli.now()); err != nil {
			return err
		}
		return writeWithResources(cli.stdout(), b.Bytes(), top, cli.now())
	case *schema.ConfigMap:
		return printers.DescribeConfigMap(cli.stdout(), o, cli.now())
	case *schema.Secret:
		return printers.DescribeSecret(cli.stdout(), o, cli.now())
	}
	return fmt.Errorf("cannot describe a %T", obj)
}

// describePodArgs reads the arguments of describe pod: "pod DEVICE/POD..." or
// "pod/DEVICE/POD...". ok is false for other kinds.
func describePodArgs(args []string) (pods []logTarget, ok bool, err error) {
	if len(args) == 0 {
		return nil, false, nil
	}
	first := strings.ToLower(args[0])
	var list []string
	switch {
	case first == "pod" || first == "pods" || first == "po":
		if len(args) < 2 {
			return nil, true, errors.New("describe pod needs DEVICE/POD: a pod is named by its device and its deployment, e.g. fleet describe pod pi-kitchen/web")
		}
		list = args[1:]
	case strings.HasPrefix(first, "pod/"):
		list = args
	default:
		return nil, false, nil
	}
	for _, a := range list {
		device, pod, dep, err := parseLogsArg(a)
		if err == nil && dep != "" {
			err = fmt.Errorf("%q: want DEVICE/POD", a)
		}
		if err != nil {
			return nil, true, err
		}
		pods = append(pods, logTarget{device: device, pod: pod})
	}
	return pods, true, nil
}

func describePods(ctx context.Context, cli *cliContext, pods []logTarget) error {
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	var errs []error
	printed := 0
	for _, p := range pods {
		var b bytes.Buffer
		if err := describePod(ctx, cli, cl, &b, p.device, p.pod); err != nil {
			errs = append(errs, err)
			continue
		}
		if printed > 0 {
			fmt.Fprintln(cli.stdout())
		}
		printed++
		if _, err := cli.stdout().Write(b.Bytes()); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// describePod writes what the hub knows of one pod on one device: its
// reported status, each container's last crash report and the device's
// events about the pod. Crash reports and events that cannot be read are
// left out.
func describePod(ctx context.Context, cli *cliContext, cl *client.Client, w io.Writer, device, pod string) error {
	rctx, cancel := cli.requestContext(ctx)
	defer cancel()
	dev, err := cl.GetDevice(rctx, device)
	if err != nil {
		return err
	}
	p := printers.PodDescription{Name: pod, Device: dev, Crashes: map[string]schema.CrashReport{}}
	if dev.Status != nil {
		for i := range dev.Status.Pods {
			if dev.Status.Pods[i].Name == pod {
				p.Status = &dev.Status.Pods[i]
			}
		}
	}
	if dep, err := cl.GetDeployment(rctx, pod); err == nil {
		p.Desired = dep.Spec.Selector.Matches(dev.Metadata.Labels)
	}
	if crs, err := cl.CrashReports(rctx, device); err == nil {
		for _, cr := range crs { // the latest per container
			if old, ok := p.Crashes[cr.Container]; cr.Pod == pod && (!ok || cr.Time.After(old.Time)) {
				p.Crashes[cr.Container] = cr
			}
		}
	} else {
		p.CrashesForbidden = client.IsForbidden(err)
	}
	if evs, err := cl.DeviceEvents(rctx, device); err == nil {
		for _, ev := range evs {
			if ev.Pod == pod {
				p.Events = append(p.Events, ev)
			}
		}
	}
	if p.Status == nil && !p.Desired && len(p.Crashes) == 0 && len(p.Events) == 0 {
		return fmt.Errorf("pod %q not found on device %q: the device has not reported it and no deployment %q targets the device", pod, device, pod)
	}
	return printers.DescribePod(w, p, cli.now())
}

// writeWithResources writes a device's description with a Resources
// block, from its last top report, before its Events.
func writeWithResources(w io.Writer, desc []byte, r *schema.TopReport, now time.Time) error {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	line := func(level int, format string, args ...any) {
		fmt.Fprintf(tw, strings.Repeat("  ", level)+format+"\n", args...)
	}
	n := r.Node
	measured := printers.Age(&r.Time, now) + " ago"
	if r.Stale {
		measured += " (stale: the device did not answer; the last figures the hub has)"
	}
	line(0, "Resources:")
	line(1, "Measured:\t%s", measured)
	load := fmt.Sprintf("%.2f, %.2f, %.2f", n.Load1, n.Load5, n.Load15)
	if n.CPUs > 0 {
		load += fmt.Sprintf(" (%d CPUs)", n.CPUs)
	}
	line(1, "Load:\t%s", load)
	if n.MemoryTotalBytes > 0 {
		line(1, "Memory:\t%s available of %s", size(n.MemoryAvailableBytes), size(n.MemoryTotalBytes))
	}
	for _, d := range []struct {
		name string
		m    *schema.DiskMetrics
	}{{"State Disk", n.StateDisk}, {"Image Disk", n.ImageDisk}} {
		if d.m != nil && d.m.TotalBytes > 0 {
			line(1, "%s:\t%s free of %s (%s)", d.name, size(d.m.FreeBytes), size(d.m.TotalBytes), d.m.Path)
		}
	}
	if n.TemperatureCelsius != nil {
		line(1, "Temperature:\t%s", temperature(n.TemperatureCelsius))
	}
	if n.Throttled != "" {
		t := n.Throttled
		if len(n.ThrottledFlags) > 0 {
			t += " (" + strings.Join(n.ThrottledFlags, ", ") + ")"
		}
		line(1, "Throttled:\t%s", t)
	}
	if len(r.Containers) > 0 {
		line(1, "Containers:")
		if err := tw.Flush(); err != nil {
			return err
		}
		rows := make([][]string, 0, len(r.Containers))
		for _, c := range r.Containers {
			row := topPodRow(*r, c, false, now)
			rows = append(rows, row[1:6]) // POD CONTAINER CPU MEMORY LIMIT
		}
		var t bytes.Buffer
		if err := printers.WriteTable(&t, []string{"POD", "CONTAINER", "CPU(cores)", "MEMORY(bytes)", "LIMIT"}, rows); err != nil {
			return err
		}
		for _, l := range strings.Split(strings.TrimRight(t.String(), "\n"), "\n") {
			fmt.Fprintf(&b, "    %s\n", l)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	at := bytes.Index(desc, []byte("\nEvents:"))
	if at < 0 {
		at = len(desc)
	} else {
		at++
	}
	out := slices.Concat(desc[:at], b.Bytes(), desc[at:])
	_, err := w.Write(out)
	return err
}
