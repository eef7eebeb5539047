package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fleetmq/fleet/schema"
)

// hubsArgs reports whether fleet get names the hubs ("hubs", "hub"),
// with the IDs that follow.
func hubsArgs(args []string) (ids []string, ok bool) {
	if len(args) == 0 {
		return nil, false
	}
	switch strings.ToLower(args[0]) {
	case "hubs", "hub":
		return args[1:], true
	}
	return nil, false
}

// runGetHubs prints the hubs of the fleet (GET /v1/hubs), the leader
// first; IDs keep those hubs.
func runGetHubs(ctx context.Context, cli *cliContext, ids []string, o getOptions) error {
	switch {
	case o.selector != "":
		return errors.New("hubs have no labels: -l is not supported for hubs")
	case o.watch:
		return errors.New("-w is not supported for hubs")
	case o.sortBy != "":
		return errors.New("--sort-by is not supported for hubs (the leader comes first)")
	}
	p, err := cli.getPrinter(o.output, "", o.noHeaders)
	if err != nil {
		return err
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	list, err := cl.Hubs(ctx)
	if err != nil {
		return err
	}
	if len(ids) > 0 {
		kept := list.Items[:0]
		for _, m := range list.Items {
			if slices.Contains(ids, m.ID) {
				kept = append(kept, m)
			}
		}
		for _, id := range ids {
			if !slices.ContainsFunc(kept, func(m schema.HubMember) bool { return m.ID == id }) {
				fmt.Fprintf(cli.stderr(), "Error from server (NotFound): hub %q not found\n", id)
			}
		}
		list.Items = kept
	}
	if len(list.Items) == 0 && !p.PrintsEmptyList() {
		fmt.Fprintln(cli.stderr(), "No resources found.")
		return nil
	}
	return p.PrintHubs(*list)
}
