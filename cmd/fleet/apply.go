package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/manifest"
	"github.com/fleetmq/fleet/client/printers"
	"github.com/fleetmq/fleet/schema"
)

type applyOptions struct {
	files     []string
	recursive bool
	dryRun    string
	output    string
}

func newApplyCmd(cli *cliContext) *cobra.Command {
	var o applyOptions
	cmd := &cobra.Command{
		Use:   "apply -f FILENAME",
		Short: "Create or update deployments and devices from manifests",
		Long: `Create or update the objects of YAML or JSON manifests in the hub.

Every manifest is decoded and validated here first, so a mistake is reported
with its file and field before anything is sent. The hub validates them again
and stores all of them or none. Applying the same manifest again changes
nothing: no generation is bumped and no device is disturbed.

Each object is reported as created, configured (changed) or unchanged.`,
		Example: `  # Apply one file
  fleet apply -f web.yaml

  # Apply every .yaml, .yml and .json file of a directory, in name order
  fleet apply -f fleet-examples/

  # Apply from standard input
  cat web.yaml | fleet apply -f -

  # See what the hub would do, without storing anything
  fleet apply -f web.yaml --dry-run=server

  # Print the stored objects (generation, resourceVersion, …)
  fleet apply -f web.yaml -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runApply(cmd.Context(), cli, cmd, o)
		},
	}
	addFilenameFlag(cmd, &o.files, "manifest file, directory or - for standard input (repeatable)")
	cmd.Flags().BoolVarP(&o.recursive, "recursive", "R", false, "read the directories given with -f recursively")
	cmd.Flags().StringVar(&o.dryRun, "dry-run", "none", `"server": the hub validates and reports what it would do, storing nothing; "none": apply`)
	cmd.Flags().Lookup("dry-run").NoOptDefVal = "server"
	addOutputFlag(cmd, &o.output, "", "print the applied objects instead: json, yaml or name")
	must(cmd.MarkFlagRequired("filename"))
	return cmd
}

func runApply(ctx context.Context, cli *cliContext, cmd *cobra.Command, o applyOptions) error {
	var dryRun bool
	switch o.dryRun {
	case "none", "":
	case "server":
		dryRun = true
	default:
		return fmt.Errorf(`--dry-run=%s: want "server" or "none"`, o.dryRun)
	}
	switch o.output {
	case "", "json", "yaml", "name":
	default:
		return fmt.Errorf("-o %s: apply prints json, yaml or name", o.output)
	}
	srcs, err := manifest.Read(o.files, manifest.ReadOptions{Recursive: o.recursive, Stdin: cmd.InOrStdin()})
	if err != nil {
		return err
	}
	if _, err := manifest.Decode(srcs); err != nil {
		return err
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	var results []schema.ApplyResult
	for _, batch := range manifest.Batches(srcs) {
		resp, err := cl.Apply(ctx, batch, dryRun)
		if err != nil {
			return err
		}
		results = append(results, resp.Results...)
		for _, w := range resp.Warnings {
			fmt.Fprintln(cli.stderr(), "Warning: "+w)
		}
	}
	return printApplyResults(ctx, cli, cl, results, dryRun, o.output)
}

// printApplyResults prints "deployment/web created" per result, or the
// objects with -o.
func printApplyResults(ctx context.Context, cli *cliContext, cl *client.Client, results []schema.ApplyResult, dryRun bool, output string) error {
	switch output {
	case "":
		for _, r := range results {
			line := strings.ToLower(r.Kind) + "/" + r.Name + " " + r.Action
			if dryRun {
				line += " (server dry run)"
			}
			if _, err := fmt.Fprintln(cli.stdout(), line); err != nil {
				return err
			}
		}
		return nil
	case "name":
		for _, r := range results {
			if _, err := fmt.Fprintln(cli.stdout(), strings.ToLower(r.Kind)+"/"+r.Name); err != nil {
				return err
			}
		}
		return nil
	}
	objs := make([]schema.Object, 0, len(results))
	for _, r := range results {
		obj, err := resultObject(ctx, cli, cl, r, dryRun)
		if err != nil {
			return err
		}
		objs = append(objs, obj)
	}
	var v any = objs
	if len(objs) == 1 {
		v = objs[0]
	} else {
		v = objectList{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "List"}, Items: objs}
	}
	if output == "json" {
		return printers.WriteJSON(cli.stdout(), v)
	}
	return printers.WriteYAML(cli.stdout(), v)
}

// objectList holds objects of mixed kinds, as kubectl's "List".
type objectList struct {
	schema.TypeMeta `json:",inline"`
	Items           []schema.Object `json:"items"`
}

// resultObject decodes the object of an apply result; a hub that left it
// out is asked for it.
func resultObject(ctx context.Context, cli *cliContext, cl *client.Client, r schema.ApplyResult, dryRun bool) (schema.Object, error) {
	kind := client.KindOf(r.Kind)
	if kind == "" {
		return nil, fmt.Errorf("the hub applied an object of unknown kind %q", r.Kind)
	}
	if len(r.Object) == 0 || string(r.Object) == "null" {
		if dryRun {
			return nil, fmt.Errorf("the hub did not return the dry-run object %s/%s", strings.ToLower(r.Kind), r.Name)
		}
		return cl.Get(ctx, kind, r.Name)
	}
	obj := schema.NewObject(r.Kind)
	if err := json.Unmarshal(r.Object, obj); err != nil {
		return nil, fmt.Errorf("decode applied %s/%s: %w", strings.ToLower(r.Kind), r.Name, err)
	}
	return obj, nil
}
