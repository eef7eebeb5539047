package main

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Topologies (-topology) and agent kinds (-agent-kind).
const (
	topologySingle  = "single"
	topologyBridged = "bridged"
	agentFull       = "full"
	agentLite       = "lite"
)

// checkTopology checks -topology, -sites, -agent-kind and
// -agents-per-process against the other flags. A bridged run uses
// Mosquitto (the hub's external-broker path) and, unless -phases was
// given, leaves out the phases it cannot run: the floor (one bare broker
// for all devices) and the rollout (it needs devices that fail a pull,
// which lite agents are not).
func checkTopology(o *options, brokerSet, phasesSet bool, phases *string) error {
	switch o.Topology {
	case topologySingle, topologyBridged:
	default:
		return fmt.Errorf("-topology %q: want %s or %s", o.Topology, topologySingle, topologyBridged)
	}
	switch o.AgentKind {
	case agentFull, agentLite:
	default:
		return fmt.Errorf("-agent-kind %q: want %s or %s", o.AgentKind, agentFull, agentLite)
	}
	if o.AgentsPerProcess < 1 {
		return errors.New("-agents-per-process must be at least 1")
	}
	var cannot []string
	if o.Topology == topologyBridged {
		if brokerSet && o.Broker != "mosquitto" {
			return fmt.Errorf("-topology bridged: the hub uses the core Mosquitto, so -broker must be mosquitto (got %q)", o.Broker)
		}
		o.Broker = "mosquitto"
		if o.Sites < 1 || o.Sites > o.Agents {
			return fmt.Errorf("-sites %d: want between 1 and -agents (%d)", o.Sites, o.Agents)
		}
		cannot = append(cannot, phaseFloor, phaseRollout)
	}
	if o.Topology != topologyBridged || !o.UplinkQuickAck {
		cannot = append(cannot, phaseUplink)
	}
	if o.AgentKind == agentLite {
		cannot = append(cannot, phaseRollout)
	}
	if len(cannot) == 0 {
		return nil
	}
	var keep []string
	for p := range strings.SplitSeq(*phases, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(cannot, p) {
			keep = append(keep, p)
			continue
		}
		if phasesSet {
			return fmt.Errorf("-phases: %s cannot run with -topology %s -agent-kind %s -uplink-quickack=%v", p, o.Topology, o.AgentKind, o.UplinkQuickAck)
		}
	}
	*phases = strings.Join(keep, ",")
	return nil
}

// topologyFlags are the flags of the fleet's shape: the hub's store, the
// bridged topology and the light agents that 100,000 devices need.
func topologyFlags(fs *flag.FlagSet, o *options) {
	fs.Func("mosquitto-option", "a line to add to mosquitto.conf (repeatable), e.g. \"set_tcp_nodelay true\"", func(v string) error {
		o.MosquittoExtra = append(o.MosquittoExtra, v)
		return nil
	})
	fs.StringVar(&o.Store, "store", "badger", "the hub's store: badger (on disk in its data dir) or etcd (a 3-member etcd cluster the suite starts on loopback, Debian's etcd-server, data under the run's directory; fleet-hub --store etcd://…)")
	fs.StringVar(&o.Topology, "topology", "single", "single: every device connects to the hub's broker; bridged: -sites Mosquitto site brokers, each bridged to the core Mosquitto the hub uses (fleet-hub --broker), the devices spread over the sites (implies -broker mosquitto; no floor or rollout phase)")
	fs.IntVar(&o.Sites, "sites", 2, "-topology bridged: how many site brokers (each should hold at most about 15,000 devices: the process file limit is 20,000)")
	fs.StringVar(&o.AgentKind, "agent-kind", "full", "full: every device runs the real edge agent (about 160 KB a device); lite: a light agent per device (one goroutine, MQTT over its own TCP connection, signed states verified, no rollout phase): for 100,000")
	fs.BoolVar(&o.UplinkQuickAck, "uplink-quickack", true, "-topology bridged: each site's bridge reaches the core through a relay in the suite that acknowledges every segment at once (Mosquitto 2.0.11 leaves Nagle's algorithm on for bridge connections, which with delayed ACKs holds each status up to 40 ms); the uplink phase cuts these relays. false: bridges connect straight to the core")
	fs.DurationVar(&o.UplinkDown, "uplink-down", 10*time.Second, "uplink phase: how long every site's uplink stays cut")
	fs.IntVar(&o.AgentsPerProcess, "agents-per-process", defaultAgentsPerProcess, "most devices one simulator process runs (each holds a socket per device, under the process file limit); the simulator's processes are started together and their replies summed")
}
