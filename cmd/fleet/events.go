package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client/printers"
	"github.com/fleetmq/fleet/schema"
)

type eventsOptions struct {
	selector  string
	forDevice string
	types     string
	limit     int
	output    string
	noHeaders bool
}

func newEventsCmd(cli *cliContext) *cobra.Command {
	var o eventsOptions
	cmd := &cobra.Command{
		Use:   "events [--for device/NAME] [-l key=value,...] [--types Warning] [--limit N] [-o table|wide|json|yaml]",
		Short: "List the recent events of the fleet's devices",
		Long: `List the recent events of every device, or of the selected ones, oldest
first: image pulls, container starts and exits, back-offs and errors, as
the agents reported them.

Columns: LAST-SEEN, TYPE (Normal or Warning), REASON, OBJECT
(pod/DEVICE/POD/CONTAINER, or device/DEVICE for the agent's own) and MESSAGE;
-o wide adds the TIME the agent stamped. -o json and -o yaml print an
EventList.

The hub keeps the last 32 events of each device in memory, so after a hub
restart only the ones heard since are listed. To follow events as they
happen, subscribe to fleet/v1/devices/+/events with a monitor credential
(fleet monitor add).`,
		Example: `  # What went wrong lately, anywhere
  fleet events --types Warning

  # One device's events
  fleet events --for device/pi-kitchen

  # One site's, the last 50
  fleet events -l site=lab --limit 50

  # Everywhere but the lab
  fleet events -l 'site!=lab'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runEvents(cmd.Context(), cli, o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.selector, "selector", "l", "", selectorUsage("only the events of devices"))
	f.StringVar(&o.forDevice, "for", "", "only this device's events (device/NAME or NAME)")
	f.StringVar(&o.types, "types", "", "only events of these types: Normal, Warning or both (comma-separated)")
	f.IntVar(&o.limit, "limit", schema.DefaultEventsLimit, "at most this many events, the newest (0: all the hub keeps)")
	addOutputFlag(cmd, &o.output, "", "output format: table (default), wide, json or yaml")
	f.BoolVar(&o.noHeaders, "no-headers", false, "leave out the header line of tables")
	return cmd
}

func runEvents(ctx context.Context, cli *cliContext, o eventsOptions) error {
	if err := checkSelector(o.selector); err != nil {
		return err
	}
	sel := o.selector
	if o.forDevice != "" {
		name := strings.TrimPrefix(o.forDevice, "device/")
		if err := schema.ValidateName(name); err != nil {
			return fmt.Errorf("--for %s: device name %w", o.forDevice, err)
		}
		if sel != "" {
			sel += ","
		}
		sel += schema.LabelDevice + "=" + name
	}
	typ, err := eventType(o.types)
	if err != nil {
		return err
	}
	if o.limit < 0 {
		return fmt.Errorf("--limit %d: want 0 (all) or more", o.limit)
	}
	p, err := cli.printer(o.output, o.noHeaders)
	if err != nil {
		return err
	}
	if p.Format == printers.Name {
		return errors.New("events have no names: use -o table, wide, json or yaml")
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	evs, err := cl.Events(ctx, sel, typ, o.limit)
	if err != nil {
		return err
	}
	if len(evs) == 0 && p.Format != printers.JSON && p.Format != printers.YAML {
		fmt.Fprintln(cli.stderr(), "No events found.")
		return nil
	}
	return p.PrintEvents(evs)
}

// eventType reads --types: "" or both types is no filter.
func eventType(types string) (string, error) {
	var normal, warning bool
	for _, t := range strings.Split(types, ",") {
		switch strings.ToLower(strings.TrimSpace(t)) {
		case "":
		case "normal":
			normal = true
		case "warning":
			warning = true
		default:
			return "", fmt.Errorf("--types %q: unknown type %q: want Normal, Warning or both", types, strings.TrimSpace(t))
		}
	}
	switch {
	case normal && !warning:
		return schema.EventNormal, nil
	case warning && !normal:
		return schema.EventWarning, nil
	}
	return "", nil
}
