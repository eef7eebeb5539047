package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/hub"
	"github.com/fleetmq/fleet/hub/mosquitto"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

func newMosquittoConfigCmd(s *settings) *cobra.Command {
	var (
		out         string
		port        int
		bind        string
		persistence string
		user        string
	)
	cmd := &cobra.Command{
		Use:   "mosquitto-config",
		Short: "Write Mosquitto 2's password file, ACL and mosquitto.conf for the fleet",
		Long: `mosquitto-config renders what an external Mosquitto 2 broker needs to enforce
Fleet's access rules (the same as the embedded broker's):

  passwd          every device (username = device name, password = its token),
                  every monitor credential, and the hub's own account
                  (--broker-username, password from --broker-password[-file]
                  or <data-dir>/mqtt-password, created if missing)
  acl             devices read their own desired topic and write their own
                  status/online/events/crashreports; monitors read every
                  device's status, online and events (never crash reports);
                  the hub reads and writes everything
  mosquitto.conf  a minimal configuration using the two files

Tokens are kept only as hashes; the hub keeps a Mosquitto ("$7$") hash of
each one it issued, so no token is needed here.

Where the accounts come from: if the hub is stopped, straight from its store
in --data-dir; if it runs (the store is locked), through its API with the
admin token of <data-dir>/admin.conf (GET /v1/mosquitto/passwd and /acl).

Run it again after adding or removing devices or credentials, or rotating a
token, and send Mosquitto SIGHUP to reload the files: Mosquitto then
disconnects the clients whose password changed or whose account is gone.
Or let the hub do that: start it with --mosquitto-config-dir (the --out
directory) and --mosquitto-pid-file (Mosquitto's pid_file, for example
/run/mosquitto/mosquitto.pid).

Without --out, the three files are printed to standard output.`,
		Example: `  fleet-hub mosquitto-config --out /etc/mosquitto/fleet
  mosquitto -c /etc/mosquitto/fleet/mosquitto.conf &
  fleet-hub --broker tcp://127.0.0.1:1883

  # After fleet device add / token rotation:
  fleet-hub mosquitto-config --out /etc/mosquitto/fleet && pkill -HUP -x mosquitto`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			conf := broker.MosquittoConf{Port: port, Bind: bind, PersistenceDir: persistence, User: user}
			return writeMosquittoConfig(cmd, s, out, conf)
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "directory to write passwd, acl and mosquitto.conf into (default: print them)")
	f.IntVar(&port, "mosquitto-port", 1883, "port of the listener in mosquitto.conf")
	f.StringVar(&bind, "mosquitto-bind", "", "address of the listener in mosquitto.conf (default: every address)")
	f.StringVar(&persistence, "mosquitto-persistence-dir", "", "turn on Mosquitto persistence in this directory")
	f.StringVar(&user, "mosquitto-user", "", "account Mosquitto switches to when started as root")
	return cmd
}

// writeMosquittoConfig renders the files and prints them (out "") or
// writes them into the directory out, with conf's listener settings.
func writeMosquittoConfig(cmd *cobra.Command, s *settings, out string, conf broker.MosquittoConf) error {
	files, warnings, err := mosquittoFiles(cmd.Context(), s)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
	}
	if out == "" {
		conf.PasswordFile, conf.ACLFile = "/etc/mosquitto/fleet/passwd", "/etc/mosquitto/fleet/acl"
		cf, err := broker.MosquittoConfFile(conf)
		if err != nil {
			return err
		}
		w := cmd.OutOrStdout()
		fmt.Fprintf(w, "# ---- passwd (mode 0600) ----\n%s\n# ---- acl ----\n%s\n# ---- mosquitto.conf ----\n%s", files.passwd, files.acl, cf)
		return nil
	}
	dir, err := filepath.Abs(out)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	conf.PasswordFile, conf.ACLFile = filepath.Join(dir, "passwd"), filepath.Join(dir, "acl")
	cf, err := broker.MosquittoConfFile(conf)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{conf.PasswordFile, files.passwd, 0o600},
		{conf.ACLFile, files.acl, 0o644},
		{filepath.Join(dir, "mosquitto.conf"), cf, 0o644},
	} {
		if err := store.WriteFileAtomic(f.path, f.data, f.mode); err != nil {
			return fmt.Errorf("write %s: %w", f.path, err)
		}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %s, %s and %s (from the %s); reload a running Mosquitto with SIGHUP\n",
		conf.PasswordFile, conf.ACLFile, filepath.Join(dir, "mosquitto.conf"), files.source)
	return nil
}

type renderedFiles struct {
	passwd, acl []byte
	source      string
}

// mosquittoFiles renders the files from the store when the hub is stopped,
// else through the running hub's API.
func mosquittoFiles(ctx context.Context, s *settings) (renderedFiles, []string, error) {
	pw, err := s.MQTT.brokerPassword()
	if err != nil {
		return renderedFiles{}, nil, err
	}
	if pw == "" {
		if pw, err = hub.EnsureMQTTPassword(s.DataDir); err != nil {
			return renderedFiles{}, nil, err
		}
	}
	topics := schema.Topics{Prefix: s.MQTT.TopicPrefix}
	account := broker.MosquittoAccount{Identity: broker.Identity{Name: s.MQTT.BrokerUsername, Role: broker.RoleHub}, Password: pw}
	passwd, acl, warnings, storeErr := mosquitto.FilesFromStore(ctx, s.DataDir, topics, account)
	if storeErr == nil {
		return renderedFiles{passwd: passwd, acl: acl, source: "store in " + s.DataDir}, warnings, nil
	}
	if !errors.Is(storeErr, mosquitto.ErrStoreBusy) {
		return renderedFiles{}, nil, storeErr
	}
	conf, err := client.ReadAdminConfig(client.AdminConfigPath(s.DataDir))
	if err != nil {
		return renderedFiles{}, nil, fmt.Errorf("the hub is running (its store is locked) and its API cannot be used: %w", err)
	}
	var files renderedFiles
	for _, f := range []struct {
		path string
		dst  *[]byte
	}{{"/v1/mosquitto/passwd", &files.passwd}, {"/v1/mosquitto/acl", &files.acl}} {
		b, err := getText(ctx, conf, f.path)
		if err != nil {
			return renderedFiles{}, nil, err
		}
		*f.dst = b
	}
	files.source = "running hub at " + conf.Hub + " (the hub's own account is the one it runs with)"
	return files, nil, nil
}

// getText GETs a text answer of the hub's API.
func getText(ctx context.Context, conf client.AdminConfig, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(conf.Hub, "/")+path, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	req.Header.Set("Authorization", "Bearer "+conf.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}
