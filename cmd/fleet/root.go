package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// newRootCmd builds the command tree. Each verb lives in its own file
// (apply.go, get.go, …) as newXxxCmd(cli).
func newRootCmd(cli *cliContext) *cobra.Command {
	root := &cobra.Command{
		Use:   "fleet",
		Short: "Run containers on fleets of edge devices through a Fleet hub",
		Long: `fleet controls a Fleet hub the way kubectl controls a Kubernetes cluster.

You declare Deployments (a pod to run on every device whose labels match a
selector) and Devices in YAML manifests; "fleet apply" stores them in the hub,
which publishes each device's desired state over MQTT; the agents on the
devices make their containers match it and report back.

Which hub and token, highest precedence first (the way kubectl finds its
cluster); each value comes from the first place that sets it:
  1. --hub and --token
  2. FLEET_HUB and FLEET_TOKEN
  3. the context named by --context, else FLEET_CONTEXT, in the config file
  4. the config file's current-context (fleet config use-context NAME)
  5. when no context is selected: the hub and token of the file named by
     --config or FLEET_CONFIG; else ./fleet-data/admin.conf (written by a
     fleet-hub started in this directory); else ~/.config/fleet/config's.
The config file is --config, else FLEET_CONFIG, else ~/.config/fleet/config.
It holds contexts, one per hub, and which is current (see fleet config
--help), or the flat form fleet-hub writes to admin.conf: YAML with
"hub: http://127.0.0.1:8080" and "token: ...".`,
		Example: `  # Start a hub here, then apply and inspect a deployment
  fleet-hub &
  fleet apply -f web.yaml
  fleet get deployments
  fleet get devices -l site=lab -o wide
  fleet rollout status deployment/web
  fleet get pods -l site=lab
  fleet describe deployment web
  fleet diff -f web.yaml

  # Debug a device: its logs, a shell in its pod, how loaded it is
  fleet logs pi-kitchen/web --tail 50
  fleet exec -it pi-kitchen/web -- sh
  fleet top devices

  # Several hubs: one context each, then switch, or pick one per command
  fleet config import site-a --from ./fleet-data/admin.conf
  fleet config use-context site-a
  fleet --context lab get devices`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&cli.hub, "hub", "", "hub API address, e.g. http://127.0.0.1:8080 (env FLEET_HUB)")
	pf.StringVar(&cli.token, "token", "", "bearer token of the hub API (env FLEET_TOKEN); prefer the environment or a config file, which other users cannot see in the process list")
	pf.StringVar(&cli.configFile, "config", "", "config file with contexts, or a hub address and token (env FLEET_CONFIG; default ~/.config/fleet/config, and ./fleet-data/admin.conf when no context is selected)")
	pf.StringVar(&cli.contextName, "context", "", "the context of the config file to use for this command (env FLEET_CONTEXT; default its current-context)")
	pf.DurationVar(&cli.timeout, "timeout", defaultTimeout, "time limit of each request to the hub (0: none); watches are not limited")
	must(root.MarkPersistentFlagFilename("config"))
	must(root.RegisterFlagCompletionFunc("context", cli.completeContexts))

	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w\nSee '%s --help' for usage.", err, c.CommandPath())
	})
	root.AddGroup(
		&cobra.Group{ID: "basic", Title: "Basic commands:"},
		&cobra.Group{ID: "debug", Title: "Troubleshooting and debugging commands:"},
		&cobra.Group{ID: "other", Title: "Other commands:"},
	)
	// One constructor per verb, each in its own file, taking the shared
	// cliContext. Add new verbs (fleet device …, fleet monitor) here.
	for _, c := range []*cobra.Command{
		newApplyCmd(cli),
		newGetCmd(cli),
		newDescribeCmd(cli),
		newExplainCmd(cli),
		newDiffCmd(cli),
		newDeleteCmd(cli),
		newRolloutCmd(cli),
		newAgentCmd(cli),
		newEventsCmd(cli),
		newDeviceCmd(cli),
		newMonitorCmd(cli),
		newCredentialCmd(cli),
		newAuditCmd(cli),
		newBackupCmd(cli),
		newTokenCmd(cli),
		newWaitCmd(cli),
	} {
		c.GroupID = "basic"
		root.AddCommand(c)
	}
	// Remote operations on devices, through the hub and MQTT.
	for _, c := range []*cobra.Command{newLogsCmd(cli), newExecCmd(cli), newTopCmd(cli)} {
		c.GroupID = "debug"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newConfigCmd(cli), newVersionCmd(cli)} {
		c.GroupID = "other"
		root.AddCommand(c)
	}
	root.SetHelpCommandGroupID("other")
	root.SetCompletionCommandGroupID("other")
	return root
}
