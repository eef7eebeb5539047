package main

// -topology bridged: a fleet spread over sites, each with its own
// Mosquitto bridged to the core Mosquitto that the hub uses.
//
//	   hub (fleet-hub --broker tcp://core)     monitor (this process)
//	              \                             /
//	            core Mosquitto (hub, monitor, one bridge account per site)
//	           /            |                 \
//	   bridge site-0    bridge site-1   …   bridge site-K      (MQTT 3.1.1, QoS 1)
//	        |               |                  |
//	  site Mosquitto   site Mosquitto      site Mosquitto     (each ≤ ~15,000 devices)
//	   devices 0…        devices …          devices …N-1      (hollow agents, own TCP each)
//
// Each site's bridge carries down (in) only its own devices' desired and
// requests topics, one `topic` line per device, so a site receives and
// retains the desired states of its devices and no others; and carries
// up (out) every device topic its devices publish: status and online
// (retained), events, responses, crash reports. A site broker keeps the
// retained desired states of its devices: while its uplink is down its
// devices stay connected to it, and a device that reconnects then still
// gets its desired state. The core holds what the hub holds with any
// external broker; the devices' accounts live only on their site.

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/scale/hollow"
)

// bridgeLocalUsername is the account each site's bridge acts as on its
// own site broker (hub role there: it publishes desired states and reads
// every device topic of the site).
const bridgeLocalUsername = "fleet-bridge"

// coreQueueLimit: the hub is the core's one subscriber to every status
// and event of N devices; a fleet-wide change queues ~3 messages a device
// for it (the default of broker.MosquittoConfFile is 100,000).
const coreQueueLimit = 1000000

// bridged is the suite's bridged topology.
type bridged struct {
	sites []*mosquittoProc
	// remote[k] is site k's bridge account on the core (hub role: it
	// publishes device topics and reads desired and requests).
	remote []broker.MosquittoAccount
	local  broker.MosquittoAccount
	// uplinks[k] is site k's link to the core (uplink.go); nil with
	// -uplink-quickack=false, where the bridges connect straight to the
	// core and the uplink phase cannot cut them.
	uplinks []*uplink
}

// siteOf is the site of device i of n: contiguous blocks, so that the
// probe device (0) is on the first site and the bytes phase's sample
// (the last devices) on the last.
func siteOf(i, n, sites int) int { return i * sites / n }

// startBridged starts the core Mosquitto (s.mosq) and the site brokers,
// each with a bridge to the core.
func (s *suite) startBridged(ctx context.Context) error {
	b := &bridged{}
	pw, err := newSecret()
	if err != nil {
		return err
	}
	b.local = broker.MosquittoAccount{Identity: broker.Identity{Name: bridgeLocalUsername, Role: broker.RoleHub}, Password: pw}
	for k := range s.o.Sites {
		pw, err := newSecret()
		if err != nil {
			return err
		}
		b.remote = append(b.remote, broker.MosquittoAccount{Identity: broker.Identity{Name: fmt.Sprintf("fleet-bridge-site-%d", k), Role: broker.RoleHub}, Password: pw})
	}
	s.bridged = b
	coreExtra := append([]string{fmt.Sprintf("max_queued_messages %d", coreQueueLimit)}, s.o.MosquittoExtra...)
	core, err := startMosquitto(ctx, filepath.Join(s.dir, "mosquitto"), s.topics, coreExtra, s.mosquittoAccounts(nil, b.remote...))
	if err != nil {
		return fmt.Errorf("core mosquitto: %w", err)
	}
	s.mosq = core
	if s.o.UplinkQuickAck {
		for range s.o.Sites {
			u, err := startUplink(core.Addr)
			if err != nil {
				return err
			}
			b.uplinks = append(b.uplinks, u)
		}
	}
	b.sites = make([]*mosquittoProc, s.o.Sites)
	return parallel(ctx, s.o.Sites, s.o.Sites, func(ctx context.Context, k int) error {
		extra := append(s.bridgeConf(k), s.o.MosquittoExtra...)
		m, err := startMosquitto(ctx, filepath.Join(s.dir, fmt.Sprintf("site-%d", k)), s.topics, extra, []broker.MosquittoAccount{b.local})
		if err != nil {
			return fmt.Errorf("site %d mosquitto: %w", k, err)
		}
		b.sites[k] = m
		return nil
	})
}

// bridgeConf is site k's bridge section of mosquitto.conf.
func (s *suite) bridgeConf(k int) []string {
	b := s.bridged
	remote := b.remote[k]
	addr := s.mosq.Addr
	if b.uplinks != nil {
		addr = b.uplinks[k].Addr()
	}
	lines := []string{
		"# The site's uplink to the core broker (scale suite, -topology bridged).",
		fmt.Sprintf("connection fleet-site-%d", k),
		"address " + addr,
		"bridge_protocol_version mqttv311",
		"remote_clientid " + remote.Name,
		"remote_username " + remote.Name,
		"remote_password " + remote.Password,
		fmt.Sprintf("local_clientid fleet-bridge-site-%d-local", k),
		"local_username " + b.local.Name,
		"local_password " + b.local.Password,
		// A clean session on each connect: the core sends the site's
		// retained desired states again when the bridge subscribes.
		"cleansession true",
		"notifications false",
		"try_private true",
		"start_type automatic",
		"restart_timeout 1 5",
		"keepalive_interval 60",
	}
	for _, kind := range []string{schema.TopicStatus, schema.TopicOnline, schema.TopicEvents, schema.TopicResponses, schema.TopicCrashReports} {
		lines = append(lines, fmt.Sprintf("topic %s out 1", s.topics.DeviceFilter(kind)))
	}
	for i, name := range s.names {
		if siteOf(i, len(s.names), s.o.Sites) != k {
			continue
		}
		lines = append(lines,
			fmt.Sprintf("topic %s in 1", s.topics.Device(name, schema.TopicDesired)),
			fmt.Sprintf("topic %s in 1", s.topics.Device(name, schema.TopicRequests)))
	}
	return lines
}

// setBridgedAccounts gives the core the hub's, the monitor's and the
// bridges' accounts, and each site its devices' and its bridge's.
func (s *suite) setBridgedAccounts(ctx context.Context) error {
	b := s.bridged
	if err := s.mosq.setAccounts(ctx, s.mosquittoAccounts(nil, b.remote...)); err != nil {
		return fmt.Errorf("core mosquitto: %w", err)
	}
	per := make([][]broker.MosquittoAccount, len(b.sites))
	for k := range per {
		per[k] = []broker.MosquittoAccount{b.local}
	}
	for i, d := range s.devices {
		k := siteOf(i, len(s.devices), len(b.sites))
		per[k] = append(per[k], broker.MosquittoAccount{Identity: broker.Identity{Name: d.Name, Role: broker.RoleDevice}, Password: d.Token})
	}
	return parallel(ctx, len(b.sites), len(b.sites), func(ctx context.Context, k int) error {
		if err := b.sites[k].setAccounts(ctx, per[k]); err != nil {
			return fmt.Errorf("site %d mosquitto: %w", k, err)
		}
		return nil
	})
}

// siteDevices points every device at its site's broker.
func (s *suite) siteDevices(devices []hollow.Device) []hollow.Device {
	out := append([]hollow.Device(nil), devices...)
	for i := range out {
		out[i].Broker = s.bridged.sites[siteOf(i, len(out), len(s.bridged.sites))].URL
	}
	return out
}

// brokers are every Mosquitto of the run: the core (or the one broker)
// and the sites.
func (s *suite) brokers() []*mosquittoProc {
	var out []*mosquittoProc
	if s.mosq != nil {
		out = append(out, s.mosq)
	}
	if s.bridged != nil {
		for _, m := range s.bridged.sites {
			if m != nil {
				out = append(out, m)
			}
		}
	}
	return out
}

// brokersCPU is the CPU time of every Mosquitto, or -1.
func (s *suite) brokersCPU() time.Duration {
	var sum time.Duration
	for _, m := range s.brokers() {
		t := cpuTime(m.cmd.Process.Pid)
		if t < 0 {
			return -1
		}
		sum += t
	}
	return sum
}

// coreCPU is the CPU time of the core Mosquitto (or the one broker), or -1.
func (s *suite) coreCPU() time.Duration {
	if s.mosq == nil {
		return -1
	}
	return cpuTime(s.mosq.cmd.Process.Pid)
}

// brokersRSS is the RSS of every Mosquitto, summed.
func (s *suite) brokersRSS() int64 {
	var sum int64
	for _, m := range s.brokers() {
		sum += max(rss(m.cmd.Process.Pid), 0)
	}
	return sum
}

// closeUplinks closes the sites' uplink relays.
func (s *suite) closeUplinks() {
	if s.bridged == nil {
		return
	}
	for _, u := range s.bridged.uplinks {
		u.close()
	}
}

// stopBrokers stops every Mosquitto at once.
func (s *suite) stopBrokers(sig syscall.Signal) {
	var wg sync.WaitGroup
	for _, m := range s.brokers() {
		wg.Go(func() { m.stop(sig) })
	}
	wg.Wait()
}

// startBrokers starts every Mosquitto again (same ports and files), the
// core first so that the bridges find it.
func (s *suite) startBrokers(ctx context.Context) error {
	ms := s.brokers()
	if len(ms) == 0 {
		return nil
	}
	if err := ms[0].start(ctx); err != nil {
		return err
	}
	return parallel(ctx, len(ms)-1, len(ms)-1, func(ctx context.Context, i int) error { return ms[i+1].start(ctx) })
}

// topologyName is the Result's topology.
func (s *suite) topologyName() string {
	if s.o.Topology != topologyBridged {
		return ""
	}
	return topologyBridged + ", " + strconv.Itoa(s.o.Sites) + " sites"
}

// agentKindName is the Result's agent kind: empty for the real agent.
func (s *suite) agentKindName() string {
	if s.o.AgentKind == agentLite {
		return agentLite
	}
	return ""
}
