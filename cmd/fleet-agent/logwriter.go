package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/edgeagent/logwriter"
	"github.com/fleetmq/fleet/schema"
)

// logWriterCmd is "fleet-agent log-writer": the program containerd's shim
// runs for each task to write its log (the runtime's Options.LogWriter,
// package logwriter). The shim passes one argument, the options as
// logwriter.Options.Encode writes them; the flags are for people.
func newLogWriterCmd() *cobra.Command {
	var path, size string
	var files int
	cmd := &cobra.Command{
		Use:    "log-writer [OPTIONS] | --path FILE [--max-size SIZE] [--max-files N]",
		Short:  "Write a container's stdout (fd 3) and stderr (fd 4) to its log, rotated by size (run by containerd's shim)",
		Hidden: true,
		Args:   cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var o logwriter.Options
			var err error
			switch {
			case len(args) == 1 && path == "":
				if o, err = logwriter.Decode(args[0]); err != nil {
					return err
				}
			case len(args) == 0 && path != "":
				o.Path, o.MaxFiles = path, files
				if o.MaxBytes, err = schema.ParseLogMaxSize(size); err != nil {
					return fmt.Errorf("--max-size: %w", err)
				}
			default:
				return errors.New("log-writer: give the shim's options or --path")
			}
			go trimLogWriter()
			return logwriter.Shim(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&path, "path", "", "the log file")
	cmd.Flags().StringVar(&size, "max-size", "10Mi", "cap of each log file")
	cmd.Flags().IntVar(&files, "max-files", logwriter.DefaultMaxFiles, "rotated files kept besides the live one")
	return cmd
}

// trimLogWriter makes a log writer, one per running container, cost
// little memory: the writer needs two 32 KiB buffers, while the agent's
// start-up (package initialisation of the containerd and MQTT clients)
// left heap and binary pages resident. Once started they go back.
func trimLogWriter() {
	debug.SetGCPercent(20)
	time.Sleep(time.Second) // the shim starts the task once the writer is ready; let it settle
	debug.FreeOSMemory()
	if _, err := releaseBinaryPages(); err != nil {
		fmt.Fprintln(os.Stderr, "log-writer: release pages:", err)
	}
}
