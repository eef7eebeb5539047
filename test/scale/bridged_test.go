package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBridgedSmoke runs the bridged topology end to end at a small size:
// a real fleet-hub on the core Mosquitto, two site Mosquittos bridged to
// it, 40 lite agents in three simulator processes. Every phase must
// complete with every device converged, none lost, no container started
// that did not have to be; through the uplink phase every device must
// stay connected to its site. Each site broker must know only its own
// devices, and bridge down only their topics; the core no device.
func TestBridgedSmoke(t *testing.T) {
	if _, err := mosquittoBinary(); err != nil {
		t.Fatalf("%v (apt-get install -y mosquitto)", err)
	}
	o := smokeOptions(t, "mosquitto")
	o.Agents, o.Topology, o.Sites, o.AgentKind, o.AgentsPerProcess = 40, topologyBridged, 2, agentLite, 15
	o.UplinkQuickAck, o.UplinkDown, o.Changes, o.Keep = true, 2*time.Second, 10, true
	o.Phases = []string{phaseConverge, phaseMemory, phaseSingle, phaseBytes, phaseUplink, phaseStorm}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	results, err := runOnce(ctx, o, log)
	var table strings.Builder
	_ = writeTable(&table, results)
	t.Logf("results:\n%s", table.String())
	if err != nil {
		t.Fatalf("run: %v\nprogress:\n%s", err, logs.String())
	}
	var names []string
	for _, r := range results {
		names = append(names, r.Name)
		if r.Error != "" || r.Lost != 0 || r.RedundantRestarts != 0 {
			t.Errorf("%s: error %q, lost %d, redundant restarts %d", r.Name, r.Error, r.Lost, r.RedundantRestarts)
		}
		if r.Topology != "bridged, 2 sites" || r.AgentKind != agentLite || r.Broker != "mosquitto" {
			t.Errorf("%s: topology %q, agent kind %q, broker %q", r.Name, r.Topology, r.AgentKind, r.Broker)
		}
		switch r.Name {
		case phaseConverge, phaseStorm, phaseUplink:
			if r.Samples != o.Agents || r.WallMS <= 0 {
				t.Errorf("%s: %d samples of %d devices, wall %v ms", r.Name, r.Samples, o.Agents, r.WallMS)
			}
		case phaseMemory:
			if r.BrokerRSSBytes <= 0 || r.AgentBytesPerDevice <= 0 || r.HubBytesPerDevice <= 0 {
				t.Errorf("hub-memory: brokers' RSS %d, %v bytes an agent, %v a device on the hub", r.BrokerRSSBytes, r.AgentBytesPerDevice, r.HubBytesPerDevice)
			}
		case phaseSingle:
			if r.Samples != o.Changes {
				t.Errorf("single-change: %d samples of %d changes", r.Samples, o.Changes)
			}
		case phaseBytes:
			if r.Bytes == nil || r.Bytes.Devices != o.BytesSample || r.Bytes.IdleWirePerDay <= 0 {
				t.Errorf("bytes: %+v", r.Bytes)
			}
		}
		if f := r.Uplink; r.Name == phaseUplink && (f == nil || f.MinConnected != o.Agents || f.Reconnects != 0 || f.AcceptedWhileDown != 0 || f.DownMS < 2000) {
			t.Errorf("uplink: %+v: want every device connected, none reconnected, nothing delivered while down", f)
		}
	}
	if !slices.Equal(names, o.Phases) {
		t.Errorf("phases %v, want %v", names, o.Phases)
	}
	checkSiteFiles(t, o)
}

// checkSiteFiles reads the kept run's broker files: the core has no
// device account; site k has its devices' accounts and a bridge topic
// for each of its devices' desired states, and none for the others'.
func checkSiteFiles(t *testing.T, o options) {
	t.Helper()
	runs, _ := filepath.Glob(filepath.Join(o.WorkDir, "fleet-scale-*"))
	if len(runs) != 1 {
		t.Fatalf("run directories %v", runs)
	}
	read := func(parts ...string) string {
		b, err := os.ReadFile(filepath.Join(append([]string{runs[0]}, parts...)...))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	names := deviceNames(o.Agents)
	core := read("mosquitto", "passwd")
	for i, name := range names {
		if strings.Contains(core, name+":") {
			t.Errorf("the core broker has an account for device %s", name)
		}
		k := siteOf(i, len(names), o.Sites)
		for site := range o.Sites {
			pw := read(fmt.Sprintf("site-%d", site), "passwd")
			conf := read(fmt.Sprintf("site-%d", site), "mosquitto.conf")
			topic := "topic fleet/v1/devices/" + name + "/desired in 1"
			if got := strings.Contains(pw, name+":") && strings.Contains(conf, topic); got != (site == k) {
				t.Errorf("site %d: account and bridge topic of %s (site %d): %v", site, name, k, got)
			}
		}
	}
}

// TestTopologyOptions: -topology, -sites, -agent-kind and
// -agents-per-process, and the phases each topology can run.
func TestTopologyOptions(t *testing.T) {
	o, err := parseOptions([]string{"-agents", "100", "-topology", "bridged", "-sites", "4", "-agent-kind", "lite", "-agents-per-process", "30"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if o.Broker != "mosquitto" || o.Sites != 4 || o.AgentKind != agentLite || o.AgentsPerProcess != 30 || !o.UplinkQuickAck ||
		slices.Contains(o.Phases, phaseFloor) || slices.Contains(o.Phases, phaseRollout) || !slices.Contains(o.Phases, phaseUplink) {
		t.Errorf("bridged options %+v", o)
	}
	o, err = parseOptions([]string{"-agents", "100"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if o.Topology != topologySingle || o.AgentKind != agentFull || slices.Contains(o.Phases, phaseUplink) || !slices.Contains(o.Phases, phaseFloor) {
		t.Errorf("default options %+v", o)
	}
	for _, bad := range [][]string{
		{"-topology", "mesh"}, {"-topology", "bridged", "-broker", "embedded"}, {"-topology", "bridged", "-sites", "0"},
		{"-agents", "3", "-topology", "bridged", "-sites", "4"}, {"-agent-kind", "tiny"}, {"-agents-per-process", "0"},
		{"-topology", "bridged", "-phases", "converge,floor"}, {"-phases", "uplink"}, {"-agent-kind", "lite", "-phases", "rollout"},
		{"-topology", "bridged", "-uplink-quickack=false", "-phases", "uplink"},
	} {
		var sink bytes.Buffer
		if _, err := parseOptions(bad, &sink); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
