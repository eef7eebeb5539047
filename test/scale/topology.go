package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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
