package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client/printers"
)

// ---- rekey -------------------------------------------------------------------

func newDeviceRekeyCmd(cli *cliContext) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "rekey NAME [-o json|yaml]",
		Short: "Let a device's next public key replace its bound key (Secrets are sealed to it)",
		Long: `Let the next public key the device reports replace the one the hub holds for it.

The hub seals the values of a device's Secrets to the device's own public key
(its agent keeps the private half in <state-dir>/device.key). That key is
bound once: when the device enrolls, or at its first report. A status that
carries another key afterwards, which is what a stolen device token would
send, is refused (a Warning DeviceKeyRefused event on the device, counted in
fleet_hub_device_key_refused_total) and nothing is sealed to it.

When a device really has a new key (its state directory was replaced or its
device.key lost), run "fleet device rekey NAME": the next other key the
device reports is bound, once (a Normal DeviceKeyRebound event), and its
Secrets are sealed to it from then on. If its token may have leaked too,
rotate the token first, so that only the real device can report a key.

-o json prints {"name":...,"keyId":...,"rekeyPending":true} (-o yaml the same
in YAML). Admin only; recorded in the audit trail.`,
		Example: `  # The device's events say DeviceKeyRefused after its SD card was replaced
  fleet describe device pi-1
  fleet device rekey pi-1

  # A token that may have leaked: new token first, then the new key
  fleet device rotate-token pi-1
  fleet device rekey pi-1`,
		Args:              exactArgs(1, "NAME"),
		ValidArgsFunction: cli.completeDevices(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDeviceRekey(cmd.Context(), cli, cmd, args[0], output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "print the hub's answer, for scripts: json or yaml")
	must(cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"json", "yaml"}, cobra.ShellCompDirectiveNoFileComp)))
	return cmd
}

func runDeviceRekey(ctx context.Context, cli *cliContext, cmd *cobra.Command, name, output string) error {
	format, cl, err := deviceCommand(cli, cmd, name, output)
	if err != nil {
		return err
	}
	out, err := cl.Rekey(ctx, name)
	if err != nil {
		return err
	}
	if format != "" {
		return printers.WriteSecret(cli.stdout(), format, out)
	}
	was := "no key was bound yet"
	if out.KeyID != "" {
		was = "it replaces key " + out.KeyID
	}
	fmt.Fprintf(cli.stdout(), "device/%s rekeyed: the next public key it reports is bound (%s); its Secrets are then sealed to the new key\n", name, was)
	return nil
}
