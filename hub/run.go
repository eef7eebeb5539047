package hub

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/hub/history"
	"github.com/fleetmq/fleet/hub/memtrim"
)

// runState is what one Run holds: the parts' context, their goroutines and
// their errors.
type runState struct {
	ctx   context.Context // the parts'; ends before the store closes
	parts sync.WaitGroup
	errs  chan error
	// brokerDone gets the embedded broker's Run result once it runs.
	brokerDone chan error
	stopping   time.Time // when the shutdown began
}

// Run serves MQTT and the API until ctx is done, then shuts everything
// down: the HTTP server (ending watch streams), the controller and the
// ingest (which writes the reports still waiting), the MQTT side, and the
// store.
func (h *Hub) Run(ctx context.Context) (err error) {
	partsCtx, stopParts := context.WithCancel(ctx)
	defer stopParts()
	r := &runState{ctx: partsCtx, errs: make(chan error, 4)}
	defer func() {
		if cerr := h.store.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		if !r.stopping.IsZero() {
			h.log.Info("hub stopped", "took", time.Since(r.stopping).Round(time.Millisecond))
		}
	}()
	// Closed by srv.Shutdown once served; this covers an early return.
	defer h.closeListeners()
	if h.tls != nil && h.tls.CertFile() != "" {
		h.reloadOnSIGHUP(partsCtx, r)
	}
	defer func() {
		stopParts()
		r.parts.Wait()
		if c := h.conn.get(); c != nil {
			err = errors.Join(err, c.Close())
		}
		if h.broker != nil {
			err = errors.Join(err, h.broker.Close())
			if r.brokerDone != nil {
				err = errors.Join(err, <-r.brokerDone)
			}
		}
	}()
	r.parts.Go(func() { h.runAudit(partsCtx) }) // audit.go
	if h.backups != nil {
		r.parts.Go(func() {
			if err := h.backups.Run(partsCtx); err != nil {
				h.log.Error("scheduled backups stopped", "err", err)
			}
		})
	}
	if h.tls != nil {
		// Renews the hub's own server certificate before its end.
		r.parts.Go(func() { _ = h.tls.Run(partsCtx) })
	}
	if h.cas != nil {
		r.parts.Go(func() { h.cas.run(partsCtx) }) // carotation.go
	}
	if h.opts.MemoryTrimInterval > 0 {
		r.parts.Go(func() { memtrim.Run(partsCtx, h.opts.MemoryTrimInterval, h.log) })
	}
	if h.mosq != nil {
		// Before connecting: the files must hold the hub's own account.
		if err := h.mosq.Start(partsCtx, &r.parts); err != nil {
			return err
		}
	}
	if h.broker != nil {
		if stop, err := h.startEmbedded(ctx, r); stop {
			return err
		}
	} else {
		r.parts.Go(func() { h.startExternal(r) })
	}
	return h.serve(ctx, r)
}

// deviceHold is the longest the embedded broker holds devices' connections
// while a starting hub rebuilds their retained states: under the agents'
// 20 s connect timeout, so a slow rebuild costs no reconnect.
const deviceHold = 15 * time.Second

// startEmbedded starts the embedded broker and the parts, and waits for
// the controller's first pass. stop means Run ends now, with err.
func (h *Hub) startEmbedded(ctx context.Context, r *runState) (stop bool, err error) {
	// The broker keeps nothing across restarts: the controller's first
	// pass rebuilds every retained desired state from the store
	// (guarantee 4). The broker accepts devices from the moment the hub
	// has subscribed, so none waits for a TCP retransmission or backs
	// off, but it holds them unread until that pass is done (or this
	// hub is a standby): 10,000 logins, subscriptions and first
	// statuses served during the load tripled it, and the restart took
	// 5.6–8.5 s instead of 1.5 s (BENCHMARKS.md, "The hub's restart").
	defer h.broker.Admit()
	listening := func() {
		r.brokerDone = make(chan error, 1)
		go func() { r.brokerDone <- h.broker.Run(context.WithoutCancel(ctx)) }()
	}
	if err := h.startParts(r, h.broker.InlineConn(), listening); err != nil {
		return true, err
	}
	// The API, and with it /healthz and Options.Ready, comes up once
	// the rebuild is done: a client that waits for the hub to be ready
	// finds every desired state retained.
	select {
	case <-h.ctrl.Ready():
		return false, nil
	case <-h.lead.standby():
		// Another hub leads (leader.go): serve the API as a standby.
		return false, nil
	case err := <-r.errs:
		return true, err
	case <-ctx.Done():
		return true, nil
	}
}

// startExternal connects to the external broker and starts the parts.
func (h *Hub) startExternal(r *runState) {
	conn, err := broker.DialExternal(r.ctx, broker.ExternalOptions{
		URL: h.opts.Broker, Username: h.opts.BrokerUsername, Password: h.mqttAccount.Password,
		ClientID: h.opts.BrokerClientID, CAFile: h.opts.BrokerCAFile,
		Logger: h.log.With("component", "mqtt"),
	})
	if err != nil {
		if r.ctx.Err() == nil {
			r.errs <- err
		}
		return
	}
	if err := h.startParts(r, conn, func() {}); err != nil {
		if r.ctx.Err() == nil {
			r.errs <- err
		}
		return
	}
	// After a reconnect the broker may have lost its retained
	// messages (a restart without persistence): publish them all.
	conn.OnConnect(h.ctrl.RepublishAll)
	if h.ha != nil {
		conn.OnConnect(h.ha.RepublishAll)
	}
}

// startParts subscribes, calls listening, loads the controller and the
// ingest, releases the messages that arrived meanwhile and runs them.
func (h *Hub) startParts(r *runState, conn broker.Conn, listening func()) error {
	h.conn.set(conn)
	if err := h.ingest.Subscribe(r.ctx); err != nil {
		return err
	}
	if err := h.enroll.Subscribe(r.ctx); err != nil {
		return err
	}
	if h.certRenew != nil {
		if err := h.certRenew.Subscribe(r.ctx); err != nil {
			return err
		}
	}
	if err := h.remote.Subscribe(r.ctx); err != nil {
		return err
	}
	if h.ha != nil {
		if err := h.ha.Subscribe(r.ctx); err != nil {
			return err
		}
	}
	listening()
	// The two loads read different keys; side by side they take the
	// longer one's time, not the sum (1.1 s at 10,000 devices).
	loadStart := time.Now()
	var ingestErr error
	var loading sync.WaitGroup
	loading.Go(func() { ingestErr = h.ingest.Load(r.ctx) })
	var ctrlErr error
	if h.lead.elector == nil {
		// On etcd the controller loads when this hub wins (leader.go).
		ctrlErr = h.ctrl.Load(r.ctx)
	} else {
		// Until then it knows the devices, whose messages are released
		// next (controller.Follow).
		ctrlErr = h.ctrl.LoadStandby(r.ctx)
	}
	loading.Wait()
	if err := errors.Join(ctrlErr, ingestErr); err != nil {
		return err
	}
	h.conn.release()
	h.log.Info("hub state loaded", "took", time.Since(loadStart).Round(time.Millisecond))
	if h.broker != nil {
		warnListenBacklog(h.log, h.model.DeviceCount(), broker.ListenBacklog)
	}
	r.parts.Go(func() {
		if err := h.runController(r.ctx); err != nil { // leader.go
			r.errs <- err
		}
	})
	r.parts.Go(func() {
		select {
		case <-h.ctrl.Ready():
			h.log.Info("retained desired states published", "took", time.Since(loadStart).Round(time.Millisecond))
		case <-r.ctx.Done():
		}
	})
	r.parts.Go(func() {
		if err := h.ingest.Run(r.ctx); err != nil {
			r.errs <- err
		}
	})
	// The charts' history, from the loaded model on (hub/history).
	r.parts.Go(func() { _ = history.NewRecorder(h.history, h.model, 0).Run(r.ctx) })
	if h.ha != nil {
		r.parts.Go(func() { h.runHomeAssistant(r.ctx) })
	}
	return nil
}

// serve serves the API until ctx is done or a part fails, then shuts the
// HTTP server down.
func (h *Hub) serve(ctx context.Context, r *runState) error {
	srv := &http.Server{
		Handler:           h.api,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       2 * time.Minute,
		WriteTimeout:      2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(h.log.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(h.api.StopStreams)
	// HTTP/1.1 only over TLS too: exec hijacks its connection.
	srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	serveErr := make(chan error, 2)
	served := 0
	if h.ln != nil {
		served++
		go func() { serveErr <- srv.Serve(h.ln) }()
	}
	if h.tlsLn != nil {
		served++
		cfg := h.tls.Config()
		cfg.NextProtos = []string{"http/1.1"}
		go func() { serveErr <- srv.Serve(tls.NewListener(h.tlsLn, cfg)) }()
	}
	h.log.Info("hub started", "api", h.info.URL, "https", h.info.HTTPSURL, "admin_config", h.info.AdminConfig, "store_id", h.info.StoreID,
		"mqtt_url", h.info.MQTTURL, "mqtt_plain_url", h.info.MQTTPlainURL, "ca_hash", h.info.CAHash, "external_broker", h.broker == nil)
	if h.opts.Ready != nil {
		h.opts.Ready(h.info)
	}
	var runErr error
	select {
	case err := <-serveErr:
		served--
		runErr = fmt.Errorf("serve http: %w", err)
	case err := <-r.errs:
		runErr = err
		h.log.Error("hub part failed; shutting down", "err", err)
	case err := <-r.brokerDone:
		r.brokerDone = nil
		runErr = fmt.Errorf("mqtt broker stopped: %w", err)
	case <-ctx.Done():
	}
	h.log.Info("hub shutting down")
	r.stopping = time.Now()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.opts.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
		return errors.Join(runErr, fmt.Errorf("shut down http: %w", err))
	}
	if runErr == nil {
		for range served {
			if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serve http: %w", err)
			}
		}
	}
	return runErr
}

// closeListeners closes the API's listeners (srv.Shutdown does it once
// they are served; this covers an early return).
func (h *Hub) closeListeners() {
	for _, ln := range []net.Listener{h.ln, h.tlsLn} {
		if ln != nil {
			ln.Close()
		}
	}
}

// reloadOnSIGHUP reads --tls-cert and --tls-key again on every SIGHUP
// until ctx ends; a pair that fails to load is logged and the current one
// kept. The signal is caught from here on, so SIGHUP no longer ends the
// process.
func (h *Hub) reloadOnSIGHUP(ctx context.Context, r *runState) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	r.parts.Go(func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := h.tls.Reload(); err != nil {
					h.log.Error("tls certificate not reloaded; keeping the current one", "err", err)
					continue
				}
				h.log.Info("tls certificate reloaded", "cert", h.tls.CertFile())
			}
		}
	})
}
