package hub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/hub/leader"
	"github.com/fleetmq/fleet/schema"
)

// HubIDFileName is the file in the data directory that keeps the hub's
// default --hub-id.
const HubIDFileName = "hub-id"

// leadership says whether this hub runs what only a leader runs: the
// controller (with the staged and agent rollouts and the publishing of
// desired states) and, with an embedded broker, the devices' connections.
// On Badger there is one hub and it always leads; on etcd the hubs elect
// one (hub/leader) and the others stand by.
type leadership struct {
	id      string
	elector *leader.Elector // nil: always the leader
	metrics *leader.Metrics
	cli     *clientv3.Client
	prefix  string
	ttl     time.Duration
	// mu orders opening the broker after a term's first pass against the
	// term's end (onLeader(false)), which may come from another
	// goroutine: a broker is never opened by a term that has ended.
	mu      sync.Mutex
	leading bool
}

// checkLeader checks --hub-id and --leader-lease.
func (o *Options) checkLeader() error {
	if o.LeaderLease != 0 {
		if err := leader.CheckLeaseTTL(o.LeaderLease); err != nil {
			return err
		}
	}
	if o.HubID != "" {
		if err := schema.ValidateName(o.HubID); err != nil {
			return fmt.Errorf("--hub-id %q: %w", o.HubID, err)
		}
	}
	return nil
}

// hubID is --hub-id, else the one kept in the data directory, made on
// first start from the host name and a random suffix.
func hubID(o Options) (string, error) {
	if o.HubID != "" {
		return o.HubID, nil
	}
	path := filepath.Join(o.DataDir, HubIDFileName)
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if err := schema.ValidateName(id); err != nil {
			return "", fmt.Errorf("%s: %q: %w (delete the file or give --hub-id)", path, id, err)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read hub id: %w", err)
	}
	host, _ := os.Hostname()
	host = strings.Trim(strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '-'
	}, host), "-")
	if len(host) > 40 {
		host = host[:40]
	}
	if host == "" {
		host = "hub"
	}
	suffix := make([]byte, 3)
	if _, err := rand.Read(suffix); err != nil {
		return "", err
	}
	id := strings.Trim(host, "-") + "-" + hex.EncodeToString(suffix)
	if err := os.WriteFile(path, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("write hub id: %w", err)
	}
	return id, nil
}

// newLeadership sets up the election on etcd (or the lone leader on
// Badger) and its metrics, and puts an embedded broker of a hub on etcd
// on standby until this hub leads.
func (h *Hub) newLeadership() error {
	m, err := leader.NewMetrics(h.metrics.Registry)
	if err != nil {
		return err
	}
	id, err := hubID(h.opts)
	if err != nil {
		return err
	}
	l := &leadership{id: id, metrics: m, ttl: h.opts.LeaderLease}
	if l.ttl == 0 {
		l.ttl = leader.DefaultLeaseTTL
	}
	h.lead = l
	cli, prefix, ok := h.store.EtcdClient()
	if !ok {
		m.Leader.Set(1)
		return nil
	}
	l.cli, l.prefix = cli, prefix
	l.elector, err = leader.New(leader.Options{
		Client: cli, Prefix: prefix, LeaseTTL: l.ttl, Metrics: m,
		Member: schema.HubMember{ID: id, APIURL: h.info.URL, BrokerURL: h.info.MQTTURL, Version: h.opts.Version},
		Logger: h.log.With("component", "leader"), OnLeader: h.onLeader,
	})
	if err != nil {
		return err
	}
	if h.broker != nil {
		h.broker.SetStandby(fmt.Sprintf("hub %s is a standby: devices connect to the leader hub (fleet get hubs)", id))
	}
	return nil
}

// standby is closed once this hub knows another hub leads; nil on Badger.
func (l *leadership) standby() <-chan struct{} {
	if l.elector == nil {
		return nil
	}
	return l.elector.Standby()
}

// onLeader is called when a term starts and ends. A leader that stops
// leading puts its broker on standby at once, which disconnects the
// devices: they move to the next leader.
func (h *Hub) onLeader(on bool) {
	h.lead.mu.Lock()
	defer h.lead.mu.Unlock()
	h.lead.leading = on
	if !on && h.broker != nil {
		h.broker.SetStandby(fmt.Sprintf("hub %s stopped leading: devices connect to the new leader hub (fleet get hubs)", h.lead.id))
	}
}

// openBroker lets devices onto the embedded broker if the term whose
// context is ctx still runs.
func (h *Hub) openBroker(ctx context.Context) {
	h.lead.mu.Lock()
	defer h.lead.mu.Unlock()
	if ctx.Err() == nil && h.lead.leading {
		h.broker.SetStandby("")
		h.log.Info("leader: desired states rebuilt; the broker accepts devices", "hub", h.lead.id)
	}
}

// runController runs the controller: at once on Badger; on etcd for the
// term this hub wins, with its commits fenced on the leadership. The
// controller's first pass rebuilds every retained desired state from the
// store before the embedded broker accepts devices. Until its term, a
// hub on etcd follows the store's devices without any pass
// (controller.Follow).
func (h *Hub) runController(ctx context.Context) error {
	if h.lead.elector == nil {
		return h.ctrl.Run(ctx)
	}
	// Until it leads, the hub follows the store's devices, for its status
	// ingest (a shared broker brings it every device's reports).
	followCtx, stopFollowing := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() {
		err := h.ctrl.Follow(followCtx)
		if err != nil {
			h.log.Error("standby: following the store's devices failed; status reports of devices it does not know are ignored", "err", err)
		}
		followed <- err
	}()
	stopFollow := sync.OnceFunc(func() {
		stopFollowing()
		<-followed
	})
	defer stopFollow()
	return h.lead.elector.Run(ctx, func(ctx context.Context) error {
		stopFollow()
		if err := h.checkTermSigningKey(ctx); err != nil { // fleetsigning.go
			return err
		}
		running := make(chan struct{})
		var opening sync.WaitGroup
		if h.broker != nil {
			opening.Go(func() {
				select {
				case <-h.ctrl.Ready():
					h.openBroker(ctx)
				case <-ctx.Done():
				case <-running:
				}
			})
		}
		err := h.ctrl.Run(ctx)
		close(running)
		opening.Wait()
		return err
	})
}

// serveHubs answers GET /v1/hubs: the hubs registered on the fleet's
// store, the leader first; on Badger this hub alone, leading.
func (h *Hub) serveHubs(w http.ResponseWriter, r *http.Request) {
	l := h.lead
	if l.elector == nil {
		api.WriteJSON(w, http.StatusOK, schema.HubMemberList{Leader: l.id, Store: "badger", Items: []schema.HubMember{{
			ID: l.id, APIURL: h.info.URL, BrokerURL: h.info.MQTTURL, Version: h.opts.Version, Leader: true,
			LeaseRemainingSeconds: -1,
		}}})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	list, err := leader.Members(ctx, l.cli, l.prefix)
	if err != nil {
		api.WriteError(w, r, h.log, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, list)
}

// fleetBrokers are the broker URLs of every hub registered on the fleet's
// etcd prefix, the leader's first, each once (hubs sharing an external
// broker give one), for GET /v1/info brokers: `fleet device add` gives
// devices them all. nil on Badger (mqttURL alone), or when etcd does not
// answer within 2 s (the info is served without them).
func (h *Hub) fleetBrokers(ctx context.Context) []string {
	l := h.lead
	if l == nil || l.elector == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	list, err := leader.Members(ctx, l.cli, l.prefix)
	if err != nil {
		h.log.Warn("GET /v1/info: the fleet's hubs are unknown; brokers left out", "err", err)
		return nil
	}
	var out []string
	for _, m := range list.Items { // the leader first
		if m.BrokerURL != "" && !slices.Contains(out, m.BrokerURL) {
			out = append(out, m.BrokerURL)
		}
	}
	if h.info.MQTTURL != "" && !slices.Contains(out, h.info.MQTTURL) {
		out = append(out, h.info.MQTTURL) // this hub, registering still
	}
	return out
}
