// Command fleet-hub runs the Fleet control plane: the store, the HTTP API,
// the embedded MQTT broker (or a connection to an external one), the
// controller and the status ingest. See `fleet-hub --help`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-hub:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return newRootCmd(os.Getenv, serveHub).ExecuteContext(ctx)
}
