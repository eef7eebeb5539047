package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/manifest"
	"github.com/fleetmq/fleet/schema"
)

// Exit statuses of fleet diff, as kubectl diff's.
const (
	diffExitDifferent = 1
	diffExitError     = 2
)

type diffOptions struct {
	files     []string
	recursive bool
}

func newDiffCmd(cli *cliContext) *cobra.Command {
	var o diffOptions
	cmd := &cobra.Command{
		Use:   "diff -f FILENAME",
		Short: "Show what apply would change",
		Long: `Compare manifests with the objects stored in the hub and print the difference
as a unified diff of their YAML: what "fleet apply" would change.

The manifests are decoded, defaulted and validated as apply does; what is
compared is the part a manifest owns (apiVersion, kind, name, labels,
annotations, spec), so the fields the hub sets — uid, generation,
resourceVersion, status, and the fleet/ labels of devices — never show. An
object that does not exist yet shows as all added.

A secret's values are never shown: each key appears with the size of its
value (token: <12 bytes>). The hub never returns the stored values, so
fleet diff asks it (a server-side dry run) whether they differ, and says
"values: changed (not shown)" when they do.

Exit status: 0 when nothing differs, 1 when something does, 2 or more on an
error (as kubectl diff and diff(1)).`,
		Example: `  fleet diff -f web.yaml
  fleet diff -f fleet-examples/ && echo "up to date"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			different, err := runDiff(cmd.Context(), cli, cmd, o)
			if err != nil {
				return &exitError{code: diffExitError, err: err}
			}
			if different {
				return &exitError{code: diffExitDifferent}
			}
			return nil
		},
	}
	addFilenameFlag(cmd, &o.files, "manifest file, directory or - for standard input (repeatable)")
	cmd.Flags().BoolVarP(&o.recursive, "recursive", "R", false, "read the directories given with -f recursively")
	must(cmd.MarkFlagRequired("filename"))
	return cmd
}

// secretValuesDiffer asks the hub, with a server-side dry run, whether
// the values of the Secret desired differ from those stored: it applies
// them with everything else as live has it, so "configured" can only mean
// the values.
func secretValuesDiffer(ctx context.Context, cl *client.Client, desired *schema.Secret, live schema.Object) (bool, error) {
	l, ok := live.(*schema.Secret)
	if !ok {
		return false, nil
	}
	probe := &schema.Secret{
		TypeMeta: desired.TypeMeta,
		Metadata: schema.ObjectMeta{Name: l.Metadata.Name, Labels: l.Metadata.Labels, Annotations: l.Metadata.Annotations},
		Type:     l.Type,
		Data:     maps.Clone(desired.Data),
	}
	for k, v := range desired.StringData {
		if probe.Data == nil {
			probe.Data = map[string][]byte{}
		}
		probe.Data[k] = []byte(v)
	}
	body, err := json.Marshal(probe)
	if err != nil {
		return false, fmt.Errorf("diff secret/%s: %w", l.Metadata.Name, err)
	}
	resp, err := cl.Apply(ctx, body, true)
	if err != nil {
		return false, fmt.Errorf("diff secret/%s: %w", l.Metadata.Name, err)
	}
	return len(resp.Results) == 1 && resp.Results[0].Action == schema.ActionConfigured, nil
}

// runDiff prints the diff of every object and reports whether any differs.
func runDiff(ctx context.Context, cli *cliContext, cmd *cobra.Command, o diffOptions) (bool, error) {
	srcs, err := manifest.Read(o.files, manifest.ReadOptions{Recursive: o.recursive, Stdin: cmd.InOrStdin()})
	if err != nil {
		return false, err
	}
	objs, err := manifest.Decode(srcs)
	if err != nil {
		return false, err
	}
	cl, err := cli.Client()
	if err != nil {
		return false, err
	}
	different := false
	for _, obj := range objs {
		live, err := cl.Get(ctx, client.KindOf(obj.GetTypeMeta().Kind), obj.GetMetadata().Name)
		switch {
		case client.IsNotFound(err):
			live = nil
		case err != nil:
			return false, err
		}
		var opts manifest.DiffOptions
		if sec, ok := obj.Object.(*schema.Secret); ok && live != nil {
			if opts.SecretValuesChanged, err = secretValuesDiffer(ctx, cl, sec, live); err != nil {
				return false, err
			}
		}
		d, err := manifest.DiffWith(live, obj, opts)
		if err != nil {
			return false, err
		}
		if d != "" {
			different = true
			if _, err := io.WriteString(cli.stdout(), d); err != nil {
				return false, err
			}
		}
	}
	return different, nil
}
