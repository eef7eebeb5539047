package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// e2ePartition: one agent loses the broker while its pod is changed three
// times; on heal it goes straight to the last version (containerd never
// created the two in between) and the other devices notice nothing.
func e2ePartition(t *testing.T, f *Fleet) {
	devs := f.Devices()
	victim, others := devs[2], devs[:2]
	a := f.Agent(t, victim)
	f.deleteOnCleanup(t, "e2e-steady", "e2e-target")
	t.Cleanup(a.Proxy.Heal) // before the deletions (cleanups run last first)

	target := func(v int) e2eDep {
		return e2eDep{Name: "e2e-target", Selector: map[string]string{schema.LabelDevice: victim},
			Args: []string{"echo", "v" + strconv.Itoa(v), "sleep", "forever"}}
	}
	f.applyDeps(t, e2eDep{Name: "e2e-steady"}, target(1))
	f.AwaitRollout(t, "e2e-steady", 3, e2eConverge)
	f.AwaitRollout(t, "e2e-target", 1, e2eConverge)
	f.AwaitConverged(t, e2eConverge, devs...)
	v1 := f.AwaitContainerRunning(t, victim, "e2e-target", f.PodHash(t, "e2e-target"))

	pids := f.TaskPIDs(t)
	marks := f.eventMarks()
	logMarks := map[string]int{}
	gens := map[string]int64{}
	for _, d := range devs {
		logMarks[d] = f.Agent(t, d).LogMark()
		gens[d] = f.Device(t, d).Status.DesiredGeneration
	}

	a.Proxy.Partition()
	// The broker sees the connection die and publishes the agent's last
	// will: the hub shows the device offline.
	f.AwaitDevices(t, 30*time.Second, "offline", func(d schema.Device) bool { return d.Status != nil && !d.Status.Online }, victim)
	var hashes []string
	gen := gens[victim]
	for v := 2; v <= 4; v++ {
		f.applyDeps(t, target(v))
		prev := gen
		got := f.AwaitDevices(t, 30*time.Second, "given a new desired generation", func(d schema.Device) bool {
			return d.Status != nil && d.Status.DesiredGeneration > prev
		}, victim)
		gen = got[victim].Status.DesiredGeneration
		hashes = append(hashes, f.PodHash(t, "e2e-target"))
	}
	// Meanwhile the device keeps running what it had.
	samePIDs(t, "partitioned device", pick(pids, victim), f.TaskPIDs(t, victim))

	a.Proxy.Heal()
	f.AwaitRollout(t, "e2e-target", 1, e2eConverge)
	got := f.AwaitConverged(t, e2eConverge, devs...)
	last := hashes[len(hashes)-1]
	f.AwaitContainerRunning(t, victim, "e2e-target", last)
	if g := got[victim].Status.ObservedGeneration; g != gen {
		t.Errorf("%s observes generation %d, want the last one, %d", victim, g, gen)
	}

	// History: the only container created after the partition is the last
	// version's, and the agent accepted no desired state but the last.
	var created []string
	for _, e := range f.eventsSince(victim, marks[victim]) {
		if e.Topic == topicContainerCreate {
			created = append(created, e.ID)
		}
	}
	if want := []string{containerID("e2e-target", last)}; !slices.Equal(created, want) {
		t.Errorf("%s: containers created after the partition %v, want only %v (intermediate versions %v)", victim, created, want, hashes[:2])
	}
	if gs := acceptedGenerations(a.Logs()[logMarks[victim]:]); !slices.Equal(gs, []int64{gen}) {
		t.Errorf("%s: accepted desired generations %v after the partition, want only %d", victim, gs, gen)
	}
	if c := f.Containers(t, victim); containsID(c, v1.ID) {
		t.Errorf("%s: the first version's container %s is still there: %+v", victim, v1.ID, c)
	}

	// The others never noticed.
	samePIDs(t, "other devices", pick(pids, others...), f.TaskPIDs(t, others...))
	for _, d := range others {
		if evs := f.eventsSince(d, marks[d]); len(evs) > 0 {
			t.Errorf("%s: containerd saw %s", d, fmtEvents(evs))
		}
		if g := got[d].Status.DesiredGeneration; g != gens[d] {
			t.Errorf("%s: desired generation moved %d -> %d", d, gens[d], g)
		}
		if logs := f.Agent(t, d).Logs()[logMarks[d]:]; strings.Contains(logs, "mqtt connection lost") {
			t.Errorf("%s lost its connection during another device's partition:\n%s", d, logs)
		}
	}
}

// e2eAgentRestartOffline: with the hub down and the broker out of reach,
// one agent is SIGKILLed and another stopped cleanly, and both start
// again: every container keeps running untouched (same task PIDs, still
// serving), and everything converges once the hub is back.
func e2eAgentRestartOffline(t *testing.T, f *Fleet) {
	devs := f.Devices()
	killed, stopped := f.Agent(t, devs[1]), f.Agent(t, devs[0])
	port := freeTCPPort(t)
	f.deleteOnCleanup(t, "e2e-autonomy", "e2e-autonomy-web")
	f.applyDeps(t, e2eDep{Name: "e2e-autonomy"}, e2eDep{
		Name: "e2e-autonomy-web", Selector: map[string]string{schema.LabelDevice: killed.Device},
		Args: []string{"serve", "127.0.0.1:" + strconv.Itoa(port)},
	})
	f.AwaitRollout(t, "e2e-autonomy", 3, e2eConverge)
	f.AwaitRollout(t, "e2e-autonomy-web", 1, e2eConverge)
	f.AwaitConverged(t, e2eConverge, devs...)
	serving := func() error {
		c := http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != "ok" {
			return fmt.Errorf("GET /: %d %q", resp.StatusCode, b)
		}
		return nil
	}
	if err := serving(); err != nil {
		t.Fatalf("the pod does not serve: %v", err)
	}
	pids := f.TaskPIDs(t)
	marks := f.eventMarks()

	// The hub is unreachable: it is down, and the two agents cannot reach
	// the broker (which on Mosquitto keeps running without the hub).
	t.Cleanup(func() {
		killed.Proxy.Heal()
		stopped.Proxy.Heal()
		if !f.Hub.running() {
			f.StartHub(t)
		}
	})
	killed.Proxy.Partition()
	stopped.Proxy.Partition()
	f.KillHub(t)

	km, sm := killed.LogMark(), stopped.LogMark()
	killed.Kill(t)
	if err := stopped.Stop(); err != nil {
		t.Errorf("SIGTERM %s: %v", stopped.Device, err)
	}
	if strings.Contains(stopped.Logs()[sm:], "removing container") {
		t.Errorf("%s removed containers on SIGTERM", stopped.Device)
	}
	samePIDs(t, "agents down", pids, f.TaskPIDs(t))
	killed.Start(t)
	stopped.Start(t)
	for _, a := range []*Agent{killed, stopped} {
		mark := map[*Agent]int{killed: km, stopped: sm}[a]
		a.AwaitLog(t, mark, "loaded persisted desired state", 30*time.Second)
		a.AwaitLog(t, mark, "adopted existing containers", 30*time.Second)
		// A full periodic resync after the adoption, still offline.
		a.AwaitLog(t, a.LogMark(), "periodic resync", 30*time.Second)
	}
	if err := serving(); err != nil {
		t.Errorf("the pod stopped serving while its agent restarted offline: %v", err)
	}
	samePIDs(t, "agents restarted offline", pids, f.TaskPIDs(t))

	killed.Proxy.Heal()
	stopped.Proxy.Heal()
	f.StartHub(t)
	f.AwaitConverged(t, e2eConverge, devs...)
	samePIDs(t, "after reconnecting", pids, f.TaskPIDs(t))
	for _, d := range devs {
		if evs := f.eventsSince(d, marks[d]); len(evs) > 0 {
			t.Errorf("%s: containerd saw %s", d, fmtEvents(evs))
		}
	}
	if err := serving(); err != nil {
		t.Errorf("the pod does not serve after the outage: %v", err)
	}
}

// e2eHubCrashBurst: fleet-hub is SIGKILLed while four clients apply as
// fast as they can. After the restart every acknowledged write is there,
// the retained desired state is back on the broker for a fresh subscriber
// with the device's token, and the device converges to it. On Mosquitto
// the broker is restarted too while the hub is down (it keeps no
// retained messages), so the retained state must come from the hub's
// store.
func e2eHubCrashBurst(t *testing.T, f *Fleet) {
	devs := f.Devices()
	d1 := devs[0]
	f.deleteOnCleanup(t, "e2e-burst")
	t.Cleanup(func() {
		if _, errOut, err := f.RunCLI(t, "", "delete", "deployments", "-l", "e2e=burst"); err != nil && !strings.Contains(errOut, "No resources") {
			t.Errorf("delete the burst's deployments: %v %s", err, errOut)
		}
	})
	t.Cleanup(func() {
		if !f.Hub.running() {
			f.StartHub(t)
		}
	})
	burst := func(i int) e2eDep {
		return e2eDep{Name: "e2e-burst", Selector: map[string]string{schema.LabelDevice: d1},
			Args: []string{"echo", "v" + strconv.Itoa(i), "sleep", "forever"}}
	}
	f.applyDeps(t, burst(0))
	f.AwaitRollout(t, "e2e-burst", 1, e2eConverge)

	type ack struct {
		uid, args string
		gen       int64
	}
	var (
		mu    sync.Mutex
		acked = map[string]ack{} // the last acknowledged write of each object
		n     int
		errs  []error
	)
	url, token, image := f.Hub.URL, f.Hub.Token, f.Image
	enough := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 1; i < 10000; i++ {
				dep := burst(i)
				if w > 0 {
					dep = e2eDep{Name: fmt.Sprintf("e2e-burst-%d-%d", w, i), Selector: map[string]string{"e2e": "nowhere"},
						Labels: map[string]string{"e2e": "burst"}}
				}
				code, body, err := hubRequest(context.Background(), url, token, http.MethodPost, "/v1/apply", []byte(dep.manifest(image)))
				if err != nil {
					return // the hub is gone
				}
				var resp schema.ApplyResponse
				var d schema.Deployment
				if code != http.StatusOK || json.Unmarshal(body, &resp) != nil || len(resp.Results) != 1 || json.Unmarshal(resp.Results[0].Object, &d) != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("apply %s: %d %s", dep.Name, code, body))
					mu.Unlock()
					return
				}
				mu.Lock()
				acked[d.Metadata.Name] = ack{uid: d.Metadata.UID, args: strings.Join(d.Spec.Template.Spec.Containers[0].Args, " "), gen: d.Metadata.Generation}
				n++
				if n == 40 {
					close(enough)
				}
				mu.Unlock()
			}
		})
	}
	select {
	case <-enough:
	case <-time.After(time.Minute):
		t.Fatal("40 applies not acknowledged within a minute")
	}
	f.KillHub(t)
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	t.Logf("%d writes acknowledged before SIGKILL, %d objects", n, len(acked))
	if f.Mosquitto != nil {
		f.Mosquitto.Restart(t) // no persistence: the retained messages are gone
	}
	f.StartHub(t)

	for name, a := range acked {
		code, body, err := f.Request(context.Background(), http.MethodGet, "/v1/deployments/"+name, nil)
		var d schema.Deployment
		if err != nil || code != http.StatusOK || json.Unmarshal(body, &d) != nil {
			t.Errorf("acknowledged %s lost: %d %v %s", name, code, err, body)
			continue
		}
		args := strings.Join(d.Spec.Template.Spec.Containers[0].Args, " ")
		if d.Metadata.UID != a.uid || d.Metadata.Generation < a.gen || d.Metadata.Generation == a.gen && args != a.args {
			t.Errorf("%s after the crash: uid %s generation %d args %q; acknowledged uid %s generation %d args %q",
				name, d.Metadata.UID, d.Metadata.Generation, args, a.uid, a.gen, a.args)
		}
	}

	// A fresh subscriber with the device's token gets the retained desired
	// state the restarted hub computed from its store.
	hash := f.PodHash(t, "e2e-burst")
	want := f.AwaitDevices(t, 30*time.Second, "given a desired generation", func(d schema.Device) bool {
		return d.Status != nil && d.Status.DesiredGeneration > 0
	}, d1)[d1].Status.DesiredGeneration
	sub := mustDialMQTT(t, f.BrokerURL, d1, f.Token(d1), dialOpts{})
	sub.subscribe(topics.Device(d1, schema.TopicDesired))
	ds := sub.awaitDesired(d1, func(ds schema.DesiredState) bool { return true })
	var pod *schema.Pod
	for i := range ds.Pods {
		if ds.Pods[i].Name == "e2e-burst" {
			pod = &ds.Pods[i]
		}
	}
	if msgs := sub.received(); !msgs[0].Retained {
		t.Errorf("the desired state was not retained")
	}
	if ds.Generation != want || pod == nil || pod.Hash != hash {
		t.Errorf("retained desired state after the crash: generation %d (hub says %d), pod %+v, want hash %s", ds.Generation, want, pod, hash)
	}
	sub.c.Disconnect(0)

	f.AwaitRollout(t, "e2e-burst", 1, e2eConverge)
	f.AwaitConverged(t, e2eConverge, devs...)
	f.AwaitContainerRunning(t, d1, "e2e-burst", hash)
}

// e2eHubRestarts: twenty hub restarts in a row (SIGKILL and SIGTERM in
// turn) with every agent attached restart no container. On the embedded
// broker each restart also restarts the broker, so the agents reconnect
// (as often as their backoff lets them) and receive the republished
// desired state; on Mosquitto the agents stay connected to the broker and
// receive each restarted hub's republished retained state.
func e2eHubRestarts(t *testing.T, f *Fleet) {
	devs := f.Devices()
	f.deleteOnCleanup(t, "e2e-survivor")
	t.Cleanup(func() {
		if !f.Hub.running() {
			f.StartHub(t)
		}
	})
	f.applyDeps(t, e2eDep{Name: "e2e-survivor"})
	f.AwaitRollout(t, "e2e-survivor", 3, e2eConverge)
	f.AwaitConverged(t, e2eConverge, devs...)
	pids := f.TaskPIDs(t)
	marks := f.eventMarks()
	logMarks := map[string]int{}
	for _, d := range devs {
		logMarks[d] = f.Agent(t, d).LogMark()
	}

	// An agent resets its reconnect backoff (1 s doubling to 60 s) only
	// after a connection that lasted a minute (edgeagent/session
	// StableAfter), which the short scenarios before never allow: after
	// them an agent can take a minute to come back. Start every agent
	// afresh (SIGTERM, start: it adopts its running containers), so the
	// waits below are seconds, not minutes.
	restartedAt := time.Now()
	for _, a := range f.Agents {
		if err := a.Stop(); err != nil {
			t.Errorf("SIGTERM %s: %v", a.Device, err)
		}
		a.Start(t)
	}
	f.AwaitDevices(t, e2eConverge, "converged after the agents restarted", func(d schema.Device) bool {
		return Converged(d) && d.Status.LastSeen != nil && d.Status.LastSeen.After(restartedAt)
	}, devs...)

	// The first restarts wait until every agent is back on the new hub;
	// the rest follow each other at once (waiting each time would take
	// many minutes on the embedded broker, for the reason above).
	const restarts, attached = 20, 2
	var lastStart time.Time
	var got map[string]schema.Device
	for i := range restarts {
		if i%2 == 0 {
			f.KillHub(t)
		} else {
			f.StopHub(t)
		}
		lastStart = time.Now()
		f.StartHub(t)
		if i < attached || i == restarts-1 {
			got = f.AwaitDevices(t, e2eConverge, fmt.Sprintf("converged and heard from after restart %d", i+1), func(d schema.Device) bool {
				return Converged(d) && d.Status.LastSeen != nil && d.Status.LastSeen.After(lastStart)
			}, devs...)
		}
	}
	samePIDs(t, fmt.Sprintf("after %d hub restarts", restarts), pids, f.TaskPIDs(t))
	for _, d := range devs {
		if evs := f.eventsSince(d, marks[d]); len(evs) > 0 {
			t.Errorf("%s: containerd saw %s", d, fmtEvents(evs))
		}
		for _, p := range got[d].Status.Pods {
			if p.Restarts != 0 || !p.Ready {
				t.Errorf("%s: pod %s restarts %d ready %v", d, p.Name, p.Restarts, p.Ready)
			}
		}
		logs := f.Agent(t, d).Logs()[logMarks[d]:]
		t.Logf("%s: %d MQTT connects, %d desired states received, %d unchanged", d,
			strings.Count(logs, `msg="mqtt connected"`), strings.Count(logs, `msg="received desired state"`), strings.Count(logs, `msg="desired state unchanged"`))
		if strings.Contains(logs, "removing container") || strings.Contains(logs, "started container") || strings.Contains(logs, "restarted container") {
			t.Errorf("%s touched containers during hub restarts:\n%s", d, logs)
		}
	}
}

// ---- helpers --------------------------------------------------------------------------

var acceptedRE = regexp.MustCompile(`msg="received desired state".* generation=(\d+)`)

// acceptedGenerations lists the generations an agent's log says it
// accepted.
func acceptedGenerations(logs string) []int64 {
	var out []int64
	for _, m := range acceptedRE.FindAllStringSubmatch(logs, -1) {
		g, _ := strconv.ParseInt(m[1], 10, 64)
		out = append(out, g)
	}
	return out
}

// pick keeps the entries of TaskPIDs's map that belong to devices.
func pick(pids map[string]uint32, devices ...string) map[string]uint32 {
	out := map[string]uint32{}
	for k, v := range pids {
		for _, d := range devices {
			if strings.HasPrefix(k, d+"/") {
				out[k] = v
			}
		}
	}
	return out
}

func containsID(cs []Container, id string) bool {
	for _, c := range cs {
		if c.ID == id {
			return true
		}
	}
	return false
}

func freeTCPPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
