package test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/etcdtest"
)

// failoverAgentKills is how many times TestE2EHubFailoverAgents kills the
// leader: FLEET_FAILOVER_AGENT_KILLS, default 2 (there and back; 1 with
// -short). The 20-kill figure of the hubs alone is TestE2EHubFailover's.
func failoverAgentKills() int {
	if n, err := strconv.Atoi(os.Getenv("FLEET_FAILOVER_AGENT_KILLS")); err == nil && n > 0 {
		return n
	}
	if testing.Short() {
		return 1
	}
	return 2
}

// agentStableAfter is the agent's session.Options.StableAfter default: a
// connection that lasted this long resets its reconnect backoff.
const agentStableAfter = 11 * time.Second // 10 s and a margin

// appliers applies ConfigMaps through every hub of p, continuously, until
// stop is called, which waits for them.
type appliers struct {
	by   map[string]*applier
	stop func()
}

func startAppliers(p *hubPair) *appliers {
	quit := make(chan struct{})
	var running sync.WaitGroup
	as := &appliers{by: map[string]*applier{}}
	for id := range p.hubs {
		a := &applier{}
		as.by[id] = a
		running.Add(1)
		go a.run(p, id, quit, &running)
	}
	var once sync.Once
	as.stop = func() {
		once.Do(func() {
			close(quit)
			running.Wait()
		})
	}
	return as
}

// checkAcked fails t unless every ConfigMap an applier got acknowledged is
// listed by every hub of p; it returns how many there were.
func checkAcked(t *testing.T, p *hubPair, as *appliers) int {
	t.Helper()
	total := 0
	for _, a := range as.by {
		total += len(a.acked)
	}
	for id := range p.hubs {
		url, token := p.url(id)
		code, body, err := tryDo(url, token, http.MethodGet, "/v1/configmaps", nil)
		if err != nil || code != http.StatusOK {
			t.Fatalf("list configmaps through %s: %d %v", id, code, err)
		}
		var list struct {
			Items []struct {
				Metadata schema.ObjectMeta `json:"metadata"`
			} `json:"items"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, it := range list.Items {
			have[it.Metadata.Name] = true
		}
		for from, a := range as.by {
			for _, name := range a.acked {
				if !have[name] {
					t.Errorf("acknowledged apply %s (through %s) missing from %s's list", name, from, id)
				}
			}
		}
	}
	return total
}

// generationLine is an agent's log line with the generation of a desired
// state: its message and the generation ("desired state applied",
// "received desired state", …).
var generationLine = regexp.MustCompile(`msg="([^"]+)".*? generation=(\d+)`)

// checkAgentGenerations fails t if an agent's log shows a generation
// lower than one it logged before for the same message: a device's
// received and applied desired state never go backwards. It returns how
// many stale states the agents refused (published by a hub, not applied).
func checkAgentGenerations(t *testing.T, agents []*Agent) (stale int) {
	t.Helper()
	for _, a := range agents {
		last := map[string]int{}
		for line := range strings.SplitSeq(a.Logs(), "\n") {
			m := generationLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			msg := m[1]
			gen, _ := strconv.Atoi(m[2])
			switch msg {
			case "desired state applied", "received desired state", "accepted desired state":
			case "ignoring stale desired state":
				stale++
				continue
			default:
				continue
			}
			if gen < last[msg] {
				t.Errorf("device %s: %q generation %d after %d: a generation went backwards\n%s", a.Device, msg, gen, last[msg], line)
			}
			last[msg] = max(last[msg], gen)
		}
		if last["desired state applied"] == 0 {
			t.Errorf("device %s logged no applied desired state", a.Device)
		}
	}
	return stale
}

// TestE2EHubFailoverAgents: two fleet-hub processes (embedded brokers,
// active/standby) on a 3-member etcd cluster and three real fleet-agent
// processes on containerd, each given both hubs' brokers (--broker a,b).
// While ConfigMaps are applied through both hubs, kill -9 of the leader
// hub: the other one leads (within the lease: measured and reported), every agent reconnects to
// its broker, no container is restarted, every device converges on the
// next change applied through the new leader, no generation goes
// backwards on any device, and every acknowledged apply is there at the
// end. The killed hub comes back as a standby; the next kill is of the
// new leader.
func TestE2EHubFailoverAgents(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{TLS: true})
	const prefix = "/fleet/failover-agents/"
	const lease = 10 * time.Second
	site := map[string]string{"site": "a"}
	f := StartFleet(t, FleetOptions{Agents: 3, DevicePrefix: "fo", HubArgs: append(etcdArgs(c, prefix), "--hub-id", "hub-a"),
		Labels: func(int) map[string]string { return site }})
	b := startSecondHub(t, f.Hub, append(etcdArgs(c, prefix), "--hub-id", "hub-b"))
	p := newHubPair(map[string]*Hub{"hub-a": f.Hub, "hub-b": b})
	p.awaitLeaderIs(t, "hub-b", "hub-a", 2, 30*time.Second)
	list := f.Hub.MQTTURL + "," + b.MQTTURL
	for _, a := range f.Agents {
		a.SetBroker(list)
		a.Restart(t) // with both brokers; restarts no container
	}
	f.Apply(t, webYAML("web-0", f.Image, site))
	for _, d := range f.Devices() {
		f.AwaitContainerRunning(t, d, "web-0")
	}
	f.AwaitConverged(t, e2eConverge, f.Devices()...)
	pids := f.TaskPIDs(t)
	if len(pids) != 3 {
		t.Fatalf("%d containers running, want 3: %v", len(pids), pids)
	}

	as := startAppliers(p)
	defer as.stop()
	leader := "hub-a"
	var elected, reconnected, converged []time.Duration
	connected := time.Now() // the agents' restart above
	for i := range failoverAgentKills() {
		next := p.other(leader)
		p.awaitLeaderIs(t, next, leader, 2, 30*time.Second)
		// A connection that lasted the agents' StableAfter (10 s) resets
		// their reconnect backoff: a real fleet's connections outlast it
		// between two failovers, so this one's must too, or the backoff
		// of one failover would add to the next one's.
		for time.Since(connected) < agentStableAfter {
			time.Sleep(pollEvery) // poll interval
		}
		marks := map[string]int{}
		for _, a := range f.Agents {
			marks[a.Device] = a.LogMark()
		}
		killed := time.Now()
		p.hubs[leader].Kill()
		took := p.awaitLeaderIs(t, next, next, 1, 3*lease)
		if took > lease+time.Second {
			// Measured, not asserted (a busy machine): reported.
			t.Logf("kill %d: %s led only %s after the kill, more than the lease (%s) and etcd's expiry check", i, next, took, lease)
		}
		elected = append(elected, took)
		for _, a := range f.Agents {
			// Within the lease and the agent's backoff (at most 1 min).
			a.AwaitLog(t, marks[a.Device], `msg="mqtt connected" device=`+a.Device+` broker=`+p.hubs[next].MQTTURL, lease+90*time.Second)
		}
		connected = time.Now()
		reconnected = append(reconnected, connected.Sub(killed))
		f.Hub = p.hubs[next]
		f.AwaitDevices(t, e2eConverge, "online and converged on the new leader", Converged, f.Devices()...)
		if got := f.TaskPIDs(t); !maps.Equal(got, pids) {
			t.Fatalf("kill %d: containers after the failover %v, before %v: the failover restarted them", i, got, pids)
		}

		// The next change, through the new leader.
		changed := time.Now()
		name := fmt.Sprintf("web-%d", i+1)
		f.Apply(t, webYAML(name, f.Image, site))
		for _, d := range f.Devices() {
			f.AwaitContainerRunning(t, d, name)
		}
		f.AwaitConverged(t, e2eConverge, f.Devices()...)
		converged = append(converged, time.Since(changed))
		now := f.TaskPIDs(t)
		for k, pid := range pids {
			if now[k] != pid {
				t.Fatalf("kill %d: container %s has task PID %d after the next change, %d before", i, k, now[k], pid)
			}
		}
		if len(now) != len(pids)+3 {
			t.Fatalf("kill %d: %d containers after the next change, want %d: %v", i, len(now), len(pids)+3, now)
		}
		pids = now
		t.Logf("kill %d of %s: %s leads after %s, every agent on its broker after %s; the next change converged in %s",
			i, leader, next, took.Round(time.Millisecond), reconnected[i].Round(time.Millisecond), converged[i].Round(time.Millisecond))

		p.restart(leader) // as systemd would: a standby now
		p.awaitLeaderIs(t, leader, next, 2, 30*time.Second)
		leader = next
	}
	as.stop()
	total := checkAcked(t, p, as)
	stale := checkAgentGenerations(t, f.Agents)
	t.Logf("failover with 3 agents over %d kills (lease %s): leader p50 %s max %s; every agent on the new leader p50 %s max %s; next change converged p50 %s max %s; %d applies acknowledged, all present; %d stale desired states refused by agents",
		len(elected), lease, pct(elected, 50), pct(elected, 100), pct(reconnected, 50), pct(reconnected, 100),
		pct(converged, 50), pct(converged, 100), total, stale)
}
