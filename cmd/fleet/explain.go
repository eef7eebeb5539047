package main

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client/printers"
	"github.com/fleetmq/fleet/schema/fielddoc/explain"
)

func newExplainCmd(cli *cliContext) *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:   "explain RESOURCE[.FIELD...] [--recursive]",
		Short: "Describe the fields of a resource type, without a hub",
		Long:  explainLong(),
		Example: `  # The fields of a deployment
  fleet explain deployment

  # A field, and the fields below it
  fleet explain deployment.spec.template.spec.containers

  # A device's labels
  fleet explain device.metadata.labels

  # Every field of a device's status, as a tree
  fleet explain device.status --recursive

  # What "fleet get pods -o yaml" prints for each pod
  fleet explain pods`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("want one RESOURCE[.FIELD...] argument, got %d: resource types are %s", len(args), explainer.TypeList())
			}
			return nil
		},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return explainer.Complete(toComplete), cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := explainer.Resolve(args[0])
			if err != nil {
				return cliError(err)
			}
			return explain.Write(cli.stdout(), t, recursive)
		},
	}
	cmd.Flags().BoolVar(&recursive, "recursive", false, "list every field below the path as a tree, without descriptions")
	return cmd
}

// explainLong is the help text of fleet explain.
func explainLong() string {
	var b bytes.Buffer
	b.WriteString(`Describe a resource type or one of its fields, as kubectl explain does: the
kind and API version, the field's type and description, then the fields
below it with theirs. A field marked -required- must be set in a manifest;
enum: lists the values a field allows.

RESOURCE is a resource type, optionally followed by a dotted path of field
names as they appear in manifests and in "fleet get -o yaml", such as
deployment.spec.template.spec.containers. The items of a list are described
at the list's path: containers.image, not containers[0].image.
--recursive lists every field below the path as a tree, without
descriptions.

The descriptions are built into fleet (from the doc comments of Fleet's API
types; docs/reference.md has them all), so explain needs no hub.

`)
	explain.Wrap(&b, "Resource types: "+explainer.TypeList()+".", "")
	return strings.TrimSuffix(b.String(), "\n")
}

// The pods `fleet get pods` lists are not an API kind: they are the pods
// the devices report, each with its device (printers.DevicePod). Their
// own fields are documented here; the rest are schema.PodStatus's.
const podDoc = `Pod is one pod on one device, as the device last reported it: an item of the PodList that "fleet get pods -o yaml" prints.

Pods are not objects of their own. A Deployment runs a pod named after it on every device its selector matches: the pod's spec is the deployment's spec.template.spec (fleet explain deployment.spec.template.spec), and each device reports its pods in its status (fleet explain device.status.pods).`

var podFieldDocs = map[string]string{
	"device":     "Device is the name of the device the pod is on.",
	"reachable":  "Reachable is true when the device is online and its last status is fresh. When it is not, the pod is shown as Unknown: it is what the device last said, not what runs now.",
	"deleted":    `Deleted is set only by "fleet get pods -w", for a pod its device no longer reports (or one of a deleted device).`,
	"presence":   "Presence is the device's: online, offline (its session ended, or it said so), stale (connected but silent for longer than the hub's --stale-after) or unknown (it has not reported).",
	"lastReport": "LastReport is when the hub last heard from the device, an RFC 3339 time: the report the pod's state comes from, or a later one.",
}

var podType = reflect.TypeFor[printers.DevicePod]()

// pods is the resource of the pods fleet get lists.
var pods = explain.Resource{
	Kind:       "Pod",
	Names:      []string{"pods", "pod", "po"},
	Type:       podType,
	Doc:        podDoc,
	FieldDocs:  podFieldDocs,
	FieldHints: map[string]string{"spec": "A pod's spec is its deployment's: fleet explain deployment.spec.template.spec"},
}

// explainer describes what fleet explain does: the stored kinds of
// schema's table, the pods, then the payloads.
var explainer = func() *explain.Explainer {
	stored, payloads := explain.Kinds()
	return &explain.Explainer{Resources: slices.Concat(stored, []explain.Resource{pods}, payloads)}
}()

// cliError prints explain's advice as the CLI prints every hint.
func cliError(err error) error {
	var he *explain.HintError
	if errors.As(err, &he) {
		return &hintError{err: he.Err, hint: he.Hint}
	}
	return err
}
