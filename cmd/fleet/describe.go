package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/printers"
	"github.com/fleetmq/fleet/schema"
)

func newDescribeCmd(cli *cliContext) *cobra.Command {
	var selector string
	cmd := &cobra.Command{
		Use:   "describe (deployment|device|configmap|secret) [NAME...] [-l key=value,...]",
		Short: "Show the details of deployments, devices, configmaps or secrets",
		Long: `Show the details of deployments, devices, configmaps or secrets, for people.

A deployment: labels, selector, strategy, the pod template (every container's
image, command, environment, mounts and limits), its status, and the pod on
each device its selector matches.

A device: labels, what its agent last reported (online, last seen, observed
and desired generation, agent version, architecture, memory and disk), the
deployments that target it, each pod with its containers' state, and its
recent events (image pulls, starts, exits, backoffs, errors), oldest first.
The hub keeps the last few events of each device in memory, so after a hub
restart only the ones heard since are shown.

A configmap: labels and its data (text values in full, binary ones by
size). A secret: labels, its type and its keys with the size of each
value; never the values, which the hub does not return.

Without a NAME, every object of the type (matching -l) is described.`,
		Example: `  fleet describe deployment web
  fleet describe device pi-kitchen
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
		return printers.DescribeDevice(cli.stdout(), o, deps, events, cli.now())
	case *schema.ConfigMap:
		return printers.DescribeConfigMap(cli.stdout(), o, cli.now())
	case *schema.Secret:
		return printers.DescribeSecret(cli.stdout(), o, cli.now())
	}
	return fmt.Errorf("cannot describe a %T", obj)
}
