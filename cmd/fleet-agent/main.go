// Command fleet-agent is Fleet's edge agent: it runs on each device,
// receives the device's desired state over MQTT, keeps a persisted copy,
// and reconciles containerd toward it. See the edgeagent package.
package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	goruntime "runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/edgeagent"
	"github.com/fleetmq/fleet/edgeagent/backoff"
	"github.com/fleetmq/fleet/edgeagent/enroll"
	"github.com/fleetmq/fleet/edgeagent/reconcile"
	"github.com/fleetmq/fleet/edgeagent/runtime/containerd"
	"github.com/fleetmq/fleet/schema"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-agent:", err)
		os.Exit(1)
	}
}

// run is main without the process: tests call it with arguments.
func run(args []string, stdout, stderr io.Writer) error {
	// SIGTERM (systemd, or the agent running as PID 1 in a container)
	// and SIGINT shut the agent down cleanly; containers keep running.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cmd := newRootCmd(stdout, stderr)
	cmd.SetArgs(args)
	return cmd.ExecuteContext(ctx)
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	var cfg config
	root := &cobra.Command{
		Use:   "fleet-agent",
		Short: "Fleet edge agent: runs this device's desired containers",
		Long: `fleet-agent keeps this device's containers matching the desired state the
Fleet hub publishes on MQTT. It persists the last desired state, so it keeps
(and restarts) its containers while offline and after a reboot. Stopping the
agent never stops containers.

Start it with the join string "fleet device add" or "fleet token create"
prints: --join fleetjoin1:... (or --join @FILE) gives the agent the broker,
the device's name and token (or a bootstrap token), the hub's CA hash and
the hub's signing key, all at once. The agent then runs only desired
states the hub signed, from the very first one.

Without a pinned signing key (no --join, no --hub-signing-key, none saved
in the state dir) the agent runs nothing from the broker, and says so in
its log and status: whoever reached the device's topic first (a rogue on
an external broker) would own it otherwise. --insecure-trust-first-key
restores trust on first use. The persisted state keeps running either way.

A device without a token can enroll itself: with a bootstrap token (in the
join string, or --bootstrap-token-file) and no token saved yet, the agent
names itself (--device, or --name-from hostname|serial|machine-id), asks
the hub over MQTT for its own token, saves it (0600) as <state-dir>/token
and from then on uses only that token, never the bootstrap token again.

The default --broker, tcp://localhost:1883, is a hub's plain listener on
this machine; a hub elsewhere is ssl://HOST:8883. Several hubs (one
leader, standbys whose brokers refuse devices): --broker takes a
comma-separated list, ssl://h1:8883,ssl://h2:8883,ssl://h3:8883 (the join
string carries every broker the hub knows of). The agent connects to the
first that accepts it and, whenever the connection is lost or refused,
moves to the next with jittered exponential backoff, round-robin, without
ever giving up; its containers keep running meanwhile. The CA pin (--ca,
--ca-hash, the saved CA) covers every broker of the list, each verified
for its own name. On a TLS broker
--ca-hash (in the join string, or given alone) pins the hub's CA: the
first connection accepts only a broker whose chain carries that CA and
whose certificate names the host dialled (for an IP address, as an IP
SAN); the CA is saved as <state-dir>/hub-ca.crt and is the only CA trusted
from then on. --ca FILE trusts that CA alone; with neither, the system's
roots.

Every flag can also be set in the --config YAML file (same key) or through
the environment as FLEET_AGENT_<FLAG> (FLEET_AGENT_STATE_DIR, ...); flags
win over the environment, which wins over the file.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.resolve(cmd.Flags()); err != nil {
				return err
			}
			return runAgent(cmd.Context(), cfg, stdout, stderr)
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(stdout)
	root.SetErr(stderr)
	cfg.bind(root.Flags())
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the agent's version, OS and architecture",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "fleet-agent %s %s/%s (%s)\n", schema.BuildVersion(), goruntime.GOOS, goruntime.GOARCH, goruntime.Version())
			return err
		},
	})
	root.AddCommand(newCheckCmd(stdout))
	root.AddCommand(newLogWriterCmd())
	return root
}

func runAgent(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	log, err := newLogger(cfg.LogLevel, stderr)
	if err != nil {
		return err
	}
	tlsCfg, trustSrc, err := cfg.brokerTLS(log)
	if err != nil {
		return err
	}
	st, err := cfg.settings()
	if err != nil {
		return err
	}
	hubKey, brokers := st.hubKey, st.brokers
	device, token, err := identity(ctx, cfg, log, tlsCfg, hubKey)
	if err != nil {
		if ctx.Err() != nil {
			// Stopped while enrolling: a clean shutdown.
			return nil
		}
		return err
	}
	if trustSrc == enroll.TrustCAHash {
		// Enrollment verified the CA by the hash and saved it: from now
		// on it is the only root.
		if tlsCfg, trustSrc, err = cfg.brokerTLS(log); err != nil {
			return err
		}
	}
	if tlsCfg != nil {
		log.Info("broker TLS", "brokers", brokers, "trust", trustSrc)
		tlsCfg = clientCert(tlsCfg, cfg.StateDir, device, log)
		// A CA bundle the hub sent in a signed desired state (a CA
		// rotation) replaces that trust once saved.
		tlsCfg = enroll.WithCABundle(tlsCfg, cfg.StateDir, cfg.brokerHost())
	}

	rtOpts, err := cfg.runtimeOptions(log)
	if err != nil {
		return err
	}
	rt, err := connectRuntime(ctx, log, rtOpts)
	if err != nil {
		if ctx.Err() != nil {
			// Stopped while waiting for containerd: a clean shutdown.
			return nil
		}
		return err
	}
	defer func() {
		if err := rt.Close(); err != nil {
			log.Warn("close containerd client", "err", err)
		}
	}()

	up, err := newUpgrade(cfg, log, stdout, stderr, rt)
	if err != nil {
		return err
	}
	opts := edgeagent.Options{
		Device:            device,
		Brokers:           brokers,
		Token:             token,
		TLSConfig:         tlsCfg,
		CAFile:            cfg.CA,
		StateDir:          cfg.StateDir,
		Topics:            schema.Topics{Prefix: cfg.TopicPrefix},
		Runtime:           rt,
		Logger:            log,
		Version:           schema.BuildVersion(),
		ResyncInterval:    st.resync,
		KeepAlive:         st.keepAlive,
		HeartbeatInterval: st.heartbeat,
		ImageGCMinFree:    st.gcFloor,
		HubSigningKey:     hubKey,

		InsecureTrustFirstKey: cfg.InsecureTrustFirstKey,
	}
	up.options(&opts)
	agent, err := edgeagent.New(opts)
	if err != nil {
		return err
	}
	if st.releaseAfter > 0 {
		go keepPagesReleased(ctx, st.releaseAfter, st.resync, log)
	}
	if err := up.run(ctx, agent); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// settings are the agent's parsed durations, sizes, pinned key and broker
// list: every flag that can be wrong is checked before anything starts.
type settings struct {
	resync, keepAlive, heartbeat, releaseAfter time.Duration
	gcFloor                                    reconcile.DiskFloor
	hubKey                                     ed25519.PublicKey
	brokers                                    []string
}

func (cfg *config) settings() (settings, error) {
	var st settings
	var err error
	if st.resync, err = cfg.resync(); err != nil {
		return st, err
	}
	if st.keepAlive, err = cfg.keepAlive(); err != nil {
		return st, err
	}
	if st.heartbeat, err = cfg.statusHeartbeat(); err != nil {
		return st, err
	}
	if st.releaseAfter, err = cfg.releasePages(); err != nil {
		return st, err
	}
	if st.gcFloor, err = cfg.imageGCMinFree(); err != nil {
		return st, err
	}
	if st.hubKey, err = cfg.hubSigningKey(); err != nil {
		return st, err
	}
	st.brokers, err = cfg.brokers()
	return st, err
}

// connectRuntime connects to containerd, retrying with backoff while it is
// not up yet (the agent may start before containerd at boot). Only a
// configuration error (bad registry settings) or ctx ends it early.
func connectRuntime(ctx context.Context, log *slog.Logger, o containerd.Options) (*containerd.Runtime, error) {
	b := backoff.New(backoff.Policy{Initial: time.Second, Max: 30 * time.Second, Jitter: 0.5}, 0)
	for {
		rt, err := containerd.New(ctx, o)
		if err == nil {
			return rt, nil
		}
		if strings.HasPrefix(err.Error(), "registry config") {
			return nil, err
		}
		d := b.Next()
		log.Warn("containerd not reachable; retrying", "socket", o.Socket, "err", err, "retry_in", d.Round(time.Millisecond))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("connect to containerd: %w", ctx.Err())
		case <-t.C:
		}
	}
}
