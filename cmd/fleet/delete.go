package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/manifest"
)

type deleteOptions struct {
	files          []string
	recursive      bool
	selector       string
	ignoreNotFound bool
}

func newDeleteCmd(cli *cliContext) *cobra.Command {
	var o deleteOptions
	cmd := &cobra.Command{
		Use:   "delete (-f FILENAME | TYPE NAME... | TYPE -l key=value)",
		Short: "Delete deployments, devices, configmaps or secrets",
		Long: `Delete the objects named in manifests, on the command line, or matching a
label selector.

TYPE is deployment, device, configmap (cm) or secret. Deleting a deployment
removes its pod from every device. Deleting a device clears its desired
state and revokes its token: its agent stops being managed. Deleting a
configmap or secret removes it from the desired state of every device whose
pods use it (the pods that need it wait for it).

Deleting an object that does not exist is an error unless --ignore-not-found;
the other objects are deleted anyway.`,
		Example: `  # Delete what a manifest defines
  fleet delete -f web.yaml

  # Delete by name
  fleet delete deployment web
  fleet delete device/pi-old deployment/test
  fleet delete secret registry

  # Delete every deployment labelled team=lab, quietly if there is none
  fleet delete deployments -l team=lab --ignore-not-found

  # Delete every device of site a or b that is not labelled keep
  fleet delete devices -l 'site in (a,b),!keep'`,
		ValidArgsFunction: cli.completeResources,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDelete(cmd.Context(), cli, cmd, args, o)
		},
	}
	addFilenameFlag(cmd, &o.files, "manifest file, directory or - whose objects to delete (repeatable)")
	cmd.Flags().BoolVarP(&o.recursive, "recursive", "R", false, "read the directories given with -f recursively")
	cmd.Flags().StringVarP(&o.selector, "selector", "l", "", selectorUsage("delete the objects of the type"))
	cmd.Flags().BoolVar(&o.ignoreNotFound, "ignore-not-found", false, "treat an object that does not exist as deleted")
	return cmd
}

func runDelete(ctx context.Context, cli *cliContext, cmd *cobra.Command, args []string, o deleteOptions) error {
	var refs []ref
	switch {
	case len(o.files) > 0:
		if len(args) > 0 || o.selector != "" {
			return errors.New("give either -f or resource names or -l, not several")
		}
		srcs, err := manifest.Read(o.files, manifest.ReadOptions{Recursive: o.recursive, Stdin: cmd.InOrStdin()})
		if err != nil {
			return err
		}
		objs, err := manifest.DecodeNames(srcs)
		if err != nil {
			return err
		}
		for _, obj := range objs {
			refs = append(refs, ref{client.KindOf(obj.GetTypeMeta().Kind), obj.GetMetadata().Name})
		}
	case o.selector != "":
		kind, named, err := parseRefs(args)
		if err != nil {
			return err
		}
		if len(named) > 0 || kind == "" {
			return errors.New("-l takes a resource type and no names: fleet delete deployments -l app=web")
		}
		if err := checkSelector(o.selector); err != nil {
			return err
		}
		cl, err := cli.Client()
		if err != nil {
			return err
		}
		objs, _, err := cl.List(ctx, kind, o.selector)
		if err != nil {
			return err
		}
		if len(objs) == 0 {
			fmt.Fprintln(cli.stderr(), "No resources found.")
			return nil
		}
		for _, obj := range objs {
			refs = append(refs, ref{kind, obj.GetMetadata().Name})
		}
	default:
		kind, named, err := parseRefs(args)
		if err != nil {
			return fmt.Errorf("%w\nfleet delete takes -f FILENAME, or a type and names: fleet delete deployment web", err)
		}
		if len(named) == 0 {
			return fmt.Errorf("name the %s to delete, or select them with -l", kind)
		}
		refs = named
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range refs {
		_, err := cl.Delete(ctx, r.kind, r.name, client.DeleteOptions{})
		switch {
		case err == nil:
			fmt.Fprintf(cli.stdout(), "%s deleted\n", r)
		case client.IsNotFound(err) && o.ignoreNotFound:
		default:
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
