package test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/reconcile"
	"github.com/fleetmq/fleet/schema"
)

// The whole fleet on one machine: a real fleet-hub, three real fleet-agent
// processes on a private containerd, real MQTT over TCP (each agent through
// its own proxy), for each broker kind. The scenarios share one fleet per
// broker kind and leave it as they found it (their deployments deleted,
// labels restored, everything connected), so each can also run alone:
//
//	go test ./test -run 'TestE2E/embedded/partition'

// e2eConverge bounds every wait for the fleet to converge. Agents
// reconnect with jittered exponential backoff (250 ms doubling to 60 s,
// full jitter, reset only after a minute connected), so a wait that
// follows several disconnects can take tens of seconds.
const e2eConverge = 2 * time.Minute

// e2eScenario is one end-to-end scenario on a shared fleet.
type e2eScenario struct {
	name string
	run  func(t *testing.T, f *Fleet)
}

var e2eScenarios = []e2eScenario{
	{"apply_converges", e2eApplyConverges},
	{"bad_image_tag_keeps_running", e2eBadTagKeepsRunning},
	{"rollout_undo_returns_to_previous", e2eRolloutUndo},
	{"staged_rollout_survives_hub_kill_and_rolls_back", e2eStagedRollout},
	{"agent_check", e2eAgentCheck},
	{"selector_and_label_move_pods", e2eMovePods},
	{"isolation", e2eIsolation},
	{"bad_payloads", e2eBadPayloads},
	{"partition_converges_to_last", e2ePartition},
	{"agent_restart_while_hub_unreachable", e2eAgentRestartOffline},
	{"hub_sigkill_during_apply_burst", e2eHubCrashBurst},
	{"hub_restarts_restart_no_container", e2eHubRestarts},
}

// e2eLabels: dev-1 and dev-3 are sensors, dev-2 a display; all three
// carry agent=yes (devices registered by a scenario, with no agent, do
// not).
func e2eLabels(i int) map[string]string {
	if i%2 == 1 {
		return map[string]string{"role": "display", "agent": "yes"}
	}
	return map[string]string{"role": "sensor", "agent": "yes"}
}

// e2eAgents selects the three agent devices.
var e2eAgents = map[string]string{"agent": "yes"}

func TestE2E(t *testing.T) {
	for _, kind := range []string{BrokerEmbedded, BrokerMosquitto} {
		t.Run(kind, func(t *testing.T) {
			start := time.Now()
			f := StartFleet(t, FleetOptions{Agents: 3, Broker: kind, Proxy: true, Labels: e2eLabels})
			t.Logf("fleet (%s) up in %v", kind, time.Since(start).Round(time.Millisecond))
			for _, sc := range e2eScenarios {
				ok := t.Run(sc.name, func(t *testing.T) {
					start := time.Now()
					sc.run(t, f)
					t.Logf("%s/%s took %v", kind, sc.name, time.Since(start).Round(time.Millisecond))
				})
				if !ok && !e2eHealthy(t, f) {
					t.Fatalf("the fleet did not recover after %s; not running the rest", sc.name)
				}
			}
		})
	}
}

// e2eHealthy reports whether every process runs and every agent's device
// is online again, after a failed scenario.
func e2eHealthy(t *testing.T, f *Fleet) bool {
	if !f.Hub.running() {
		return false
	}
	for _, a := range f.Agents {
		if !a.Running() || a.Proxy != nil && a.Proxy.Partitioned() {
			return false
		}
	}
	return true
}

// ---- manifests ---------------------------------------------------------------------

// e2eDep is a Deployment of the test image.
type e2eDep struct {
	Name string
	// Selector defaults to e2eAgents.
	Selector map[string]string
	// Args of the test image (default: sleep forever). A different Args
	// is a different pod version.
	Args   []string
	Env    map[string]string
	Labels map[string]string
	// Image replaces the test image; Strategy is spec.strategy.
	Image    string
	Strategy map[string]any
	// Spec are more spec fields (updateWindow, updateLock).
	Spec map[string]any
}

func (d e2eDep) manifest(image string) string {
	args := d.Args
	if args == nil {
		args = []string{"sleep", "forever"}
	}
	if d.Image != "" {
		image = d.Image
	}
	c := schema.Container{Name: "app", Image: image, Args: args}
	for _, k := range slices.Sorted(maps.Keys(d.Env)) {
		c.Env = append(c.Env, schema.EnvVar{Name: k, Value: d.Env[k]})
	}
	sel := d.Selector
	if sel == nil {
		sel = e2eAgents
	}
	dep := map[string]any{
		"apiVersion": schema.APIVersion,
		"kind":       schema.KindDeployment,
		"metadata":   map[string]any{"name": d.Name, "labels": d.Labels},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": sel},
			"template": map[string]any{"spec": map[string]any{"containers": []schema.Container{c}}},
		},
	}
	if d.Strategy != nil {
		dep["spec"].(map[string]any)["strategy"] = d.Strategy
	}
	for k, v := range d.Spec {
		dep["spec"].(map[string]any)[k] = v
	}
	b, err := json.Marshal(dep)
	if err != nil {
		panic(err)
	}
	return string(b) + "\n"
}

// apply applies deps as one multi-document manifest.
func (f *Fleet) applyDeps(t testing.TB, deps ...e2eDep) {
	t.Helper()
	var docs []string
	for _, d := range deps {
		docs = append(docs, d.manifest(f.Image))
	}
	f.Apply(t, strings.Join(docs, "---\n"))
}

// deleteOnCleanup deletes the deployments when the test ends and waits
// until no device runs them.
func (f *Fleet) deleteOnCleanup(t testing.TB, names ...string) {
	t.Helper()
	t.Cleanup(func() {
		for _, n := range names {
			if _, errOut, err := f.RunCLI(t, "", "delete", "deployment", n, "--ignore-not-found"); err != nil {
				t.Errorf("delete deployment %s: %v %s", n, err, errOut)
			}
		}
		for _, d := range f.Devices() {
			for _, n := range names {
				f.AwaitNoContainer(t, d, n)
			}
		}
	})
}

// containerID is the ID the agent gives the one container ("app") of a
// pod version.
func containerID(pod, hash string) string { return reconcile.ContainerID(pod, "app", hash) }

// samePIDs fails t unless every container of before still runs with the
// same task PID (and no container appeared or vanished).
func samePIDs(t testing.TB, what string, before, after map[string]uint32) {
	t.Helper()
	if !maps.Equal(before, after) {
		t.Errorf("%s: containers and task PIDs changed:\nbefore %v\nafter  %v", what, before, after)
	}
	for id, pid := range after {
		if pid == 0 {
			t.Errorf("%s: %s has no running task", what, id)
		}
	}
}

// eventsSince returns the containerd events of device after mark (a
// count of its events).
func (f *Fleet) eventsSince(device string, mark int) []ContainerdEvent {
	evs := f.ContainerdEvents(device)
	if mark > len(evs) {
		return nil
	}
	return evs[mark:]
}

// eventMarks counts each device's containerd events so far.
func (f *Fleet) eventMarks() map[string]int {
	m := map[string]int{}
	for _, d := range f.Devices() {
		m[d] = len(f.ContainerdEvents(d))
	}
	return m
}

func fmtEvents(evs []ContainerdEvent) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "%s %s; ", e.Topic, e.ID)
	}
	return b.String()
}
