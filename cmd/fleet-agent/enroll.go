package main

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"

	"github.com/fleetmq/fleet/edgeagent/devicekey"
	"github.com/fleetmq/fleet/edgeagent/enroll"
	"github.com/fleetmq/fleet/schema"
)

// identity returns the device's name and token: --token/--token-file as
// given; else the token an earlier enrollment saved in the state dir (the
// bootstrap token is then never used again); else, with a bootstrap token,
// it enrolls now. Without any of them the agent runs with --device and no
// token, as before.
func identity(ctx context.Context, cfg config, log *slog.Logger, tlsCfg *tls.Config, hubKey ed25519.PublicKey) (device, token string, err error) {
	if cfg.Token != "" || cfg.TokenFile != "" {
		token, err := cfg.token()
		return cfg.Device, token, err
	}
	stored, err := enroll.Stored(cfg.StateDir)
	switch {
	case err == nil:
		if cfg.Device != "" && cfg.Device != stored.Device {
			return "", "", fmt.Errorf("the state dir %s holds the token of device %q, enrolled earlier, not of --device %s", cfg.StateDir, stored.Device, cfg.Device)
		}
		attrs := []any{"device", stored.Device, "token_file", filepath.Join(cfg.StateDir, enroll.TokenFile)}
		if cfg.bootstrap() {
			attrs = append(attrs, "bootstrap_token", "not used: already enrolled")
		}
		log.Info("using the device token saved at enrollment", attrs...)
		return stored.Device, stored.Token, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", "", err
	case !cfg.bootstrap():
		return cfg.Device, "", nil
	}

	bt, err := cfg.bootstrapToken()
	if err != nil {
		return "", "", err
	}
	if _, err := schema.ParseBootstrapToken(bt); err != nil {
		return "", "", fmt.Errorf("bootstrap token: %w", err)
	}
	device = cfg.Device
	if device == "" {
		src, err := enroll.ParseNameSource(cfg.NameFrom)
		if err != nil {
			return "", "", err
		}
		if device, err = enroll.DeviceName(src, enroll.NameOptions{}); err != nil {
			return "", "", fmt.Errorf("%w (set --device, or another --name-from)", err)
		}
	}
	var pub string
	if key, err := devicekey.LoadOrCreate(cfg.StateDir); err != nil {
		log.Warn("enrolling without the device key: it is unusable", "err", err)
	} else {
		pub = key.PublicKey()
	}
	brokers, err := cfg.brokers()
	if err != nil {
		return "", "", err
	}
	id, err := enroll.Run(ctx, enroll.Options{
		Brokers: brokers, TLSConfig: tlsCfg, Topics: schema.Topics{Prefix: cfg.TopicPrefix},
		BootstrapToken: bt, Device: device, StateDir: cfg.StateDir, Logger: log, PublicKey: pub,
		SigningKey: hubKey, InsecureTrustFirstKey: cfg.InsecureTrustFirstKey,
	})
	if err != nil {
		return "", "", err
	}
	return id.Device, id.Token, nil
}

// clientCert makes the agent present the device's client certificate
// (<state-dir>/client.crt, from enrollment or the operator) on TLS
// connections when the broker asks. A device without one (added with a
// token) gets <state-dir>/client.csr written, for the operator to have
// signed by POST /v1/devices/NAME/certificate; the answer's certificate,
// saved as client.crt, is used from the next connection on.
func clientCert(tlsCfg *tls.Config, stateDir, device string, log *slog.Logger) *tls.Config {
	if !enroll.HasClientCert(stateDir) && device != "" {
		if p, err := enroll.WriteClientCSR(stateDir, device); err != nil {
			log.Warn("no client certificate, and no request for one could be written", "err", err)
		} else {
			log.Info("no client certificate: a hub that requires them refuses this device; have the request signed (POST /v1/devices/NAME/certificate) and save the answer's certificate as client.crt",
				"request", p, "certificate", filepath.Join(stateDir, enroll.ClientCertFile))
		}
	}
	return enroll.WithClientCert(tlsCfg, stateDir)
}
