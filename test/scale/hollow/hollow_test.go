package hollow_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/edgeagent/backoff"
	"github.com/fleetmq/fleet/edgeagent/session"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/scale/hollow"
)

// startBroker runs an embedded broker that knows the devices.
func startBroker(t *testing.T, devices []hollow.Device) *broker.Broker {
	t.Helper()
	auth := broker.NewStaticAuth()
	for _, d := range devices {
		auth.Set(broker.Identity{Name: d.Name, Role: broker.RoleDevice}, d.Token)
	}
	b, err := broker.New(broker.Options{Addr: "127.0.0.1:0", Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("broker: %v", err)
		}
	})
	return b
}

func devices(n int) []hollow.Device {
	var ds []hollow.Device
	for i := range n {
		ds = append(ds, hollow.Device{Name: "dev-" + string(rune('a'+i)), Token: "token-" + string(rune('a'+i))})
	}
	return ds
}

// TestAgentsConvergeAndReport drives a simulator over its line protocol:
// the agents connect, apply a desired state published by the broker's
// in-process client, start its container once, and say so in their stats.
func TestAgentsConvergeAndReport(t *testing.T) {
	devs := devices(3)
	b := startBroker(t, devs)
	conn := b.InlineConn()
	defer conn.Close()
	topics := schema.Topics{}
	statuses := make(chan string, 100)
	if err := conn.Subscribe(t.Context(), topics.DeviceFilter(schema.TopicStatus), func(topic string, payload []byte) {
		var st schema.DeviceStatus
		if json.Unmarshal(payload, &st) == nil && st.ObservedGeneration == 1 && len(st.Pods) == 1 && st.Pods[0].Ready {
			statuses <- st.Device
		}
	}); err != nil {
		t.Fatal(err)
	}
	cfg := hollow.Config{
		Broker: "tcp://" + b.Addr().String(), Devices: devs, StateRoot: t.TempDir(),
		StartLatency: time.Millisecond, StatusInterval: time.Millisecond,
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- hollow.Serve(ctx, cfg, inR, outW, nil) }()
	replies := bufio.NewScanner(outR)
	next := func() hollow.Reply {
		t.Helper()
		if !replies.Scan() {
			t.Fatalf("no reply: %v", replies.Err())
		}
		var r hollow.Reply
		if err := json.Unmarshal(replies.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := next(); r.Op != "ready" {
		t.Fatalf("first reply %+v, want ready", r)
	}
	stats := func() hollow.Stats {
		t.Helper()
		if _, err := io.WriteString(inW, `{"op":"stats"}`+"\n"); err != nil {
			t.Fatal(err)
		}
		r := next()
		if r.Op != "stats" || r.Stats == nil {
			t.Fatalf("reply %+v, want stats", r)
		}
		return *r.Stats
	}
	for st := stats(); st.Connected < len(devs); st = stats() {
		select {
		case <-ctx.Done():
			t.Fatalf("connected: %+v", st)
		case <-time.After(10 * time.Millisecond): // polling another party's state
		}
	}
	for _, d := range devs {
		ds := schema.DesiredState{
			TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState},
			Device:   d.Name, Generation: 1, Store: "s1",
			Pods: []schema.Pod{{Name: "p", Spec: schema.PodSpec{Containers: []schema.Container{{Name: "c", Image: "img:1"}}}}},
		}
		schema.DefaultPodSpec(&ds.Pods[0].Spec)
		ds.Pods[0].Hash = schema.PodSpecHash(ds.Pods[0].Spec)
		payload, _ := json.Marshal(ds)
		if err := conn.Publish(ctx, topics.Device(d.Name, schema.TopicDesired), payload, true); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for len(seen) < len(devs) {
		select {
		case d := <-statuses:
			seen[d] = true
		case <-ctx.Done():
			t.Fatalf("converged: %v", seen)
		}
	}
	st := stats()
	if st.Starts != len(devs) || st.Accepted != int64(len(devs)) || st.RSSBytes <= 0 {
		t.Errorf("stats %+v: want %d starts and accepted", st, len(devs))
	}
	if _, err := io.WriteString(inW, `{"op":"stop"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	if r := next(); r.Op != "stopped" {
		t.Errorf("reply %+v, want stopped", r)
	}
	if err := <-served; err != nil {
		t.Errorf("serve: %v", err)
	}
	inW.Close()
}

// TestFloorClientsEcho checks the bare clients answer each desired state
// with a status carrying its generation.
func TestFloorClientsEcho(t *testing.T) {
	devs := devices(2)
	b := startBroker(t, devs)
	conn := b.InlineConn()
	defer conn.Close()
	topics := schema.Topics{}
	echoes := make(chan string, 10)
	if err := conn.Subscribe(t.Context(), topics.DeviceFilter(schema.TopicStatus), func(topic string, payload []byte) {
		var st schema.DeviceStatus
		if json.Unmarshal(payload, &st) == nil && st.ObservedGeneration == 7 {
			echoes <- st.Device
		}
	}); err != nil {
		t.Fatal(err)
	}
	s, err := hollow.New(hollow.Config{Mode: hollow.ModeFloor, Broker: "tcp://" + b.Addr().String(), Devices: devs}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	for s.Stats().Connected < len(devs) {
		select {
		case <-ctx.Done():
			t.Fatalf("connected: %+v", s.Stats())
		case <-time.After(10 * time.Millisecond): // polling the clients' state
		}
	}
	for _, d := range devs {
		if err := conn.Publish(ctx, topics.Device(d.Name, schema.TopicDesired), []byte(`{"generation":7}`), true); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for len(seen) < len(devs) {
		select {
		case d := <-echoes:
			seen[d] = true
		case <-ctx.Done():
			t.Fatalf("echoes: %v", seen)
		}
	}
	if st := s.Stats(); st.FloorEchoed != int64(len(devs)) || st.FloorErrors != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestConfigCheckAndFile(t *testing.T) {
	if _, err := hollow.New(hollow.Config{Mode: "bogus", Broker: "tcp://x:1", Devices: devices(1)}, nil); err == nil {
		t.Error("bad mode accepted")
	}
	if _, err := hollow.New(hollow.Config{Broker: "tcp://x:1", Devices: devices(1)}, nil); err == nil || !strings.Contains(err.Error(), "state root") {
		t.Errorf("agents without a state root: %v", err)
	}
	path := t.TempDir() + "/c.json"
	want := hollow.Config{Broker: "tcp://x:1", Devices: devices(2), StartLatency: 65 * time.Millisecond}
	if err := hollow.WriteConfig(path, want); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("config file mode: %v %v", fi, err)
	}
	got, err := hollow.LoadConfig(path)
	if err != nil || got.StartLatency != want.StartLatency || len(got.Devices) != 2 {
		t.Errorf("round trip: %+v %v", got, err)
	}
	if r := hollow.RSS(os.Getpid()); r <= 0 {
		t.Errorf("RSS of self: %d", r)
	}
}

// TestReconnectBackoff: by default the agents keep their own jittered
// backoff; ReconnectAtOnce keeps its schedule and drops the jitter, so
// every agent waits exactly as long as every other.
func TestReconnectBackoff(t *testing.T) {
	if p := (hollow.Config{}).ReconnectBackoff(); p != (backoff.Policy{}) {
		t.Errorf("default: %+v, want the zero Policy (the agent's own default)", p)
	}
	p := hollow.Config{ReconnectAtOnce: true}.ReconnectBackoff()
	want := session.DefaultBackoff
	want.Jitter = 0
	if p != want {
		t.Fatalf("at once: %+v, want %+v", p, want)
	}
	a, b := backoff.New(p, 1), backoff.New(p, 2)
	for i := range 5 {
		if da, db := a.Next(), b.Next(); da != db || da != p.Delay(i) {
			t.Errorf("retry %d: %v and %v, want both %v", i, da, db, p.Delay(i))
		}
	}
	// The default's full jitter does spread two agents.
	j1, j2 := backoff.New(session.DefaultBackoff, 1), backoff.New(session.DefaultBackoff, 2)
	same := 0
	for range 5 {
		if j1.Next() == j2.Next() {
			same++
		}
	}
	if same == 5 {
		t.Error("the default backoff did not spread two agents")
	}
}

// TestFailImage: on the devices of FailDevices the fake runtime cannot
// pull FailImage, so the real agent keeps the running version and reports
// the new pod in ImagePullBackOff; the other devices run it.
func TestFailImage(t *testing.T) {
	devs := devices(2)
	good, bad := devs[0].Name, devs[1].Name
	b := startBroker(t, devs)
	conn := b.InlineConn()
	defer conn.Close()
	topics := schema.Topics{}
	type report struct {
		device string
		pod    schema.PodStatus
	}
	reports := make(chan report, 1000)
	if err := conn.Subscribe(t.Context(), topics.DeviceFilter(schema.TopicStatus), func(topic string, payload []byte) {
		var st schema.DeviceStatus
		if json.Unmarshal(payload, &st) == nil && len(st.Pods) == 1 {
			reports <- report{st.Device, st.Pods[0]}
		}
	}); err != nil {
		t.Fatal(err)
	}
	const badImage = "registry.example.com/app:2-bad"
	s, err := hollow.New(hollow.Config{
		Broker: "tcp://" + b.Addr().String(), Devices: devs, StateRoot: t.TempDir(),
		StatusInterval: time.Millisecond, FailImage: badImage, FailDevices: []string{bad},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	for s.Stats().Connected < len(devs) {
		select {
		case <-ctx.Done():
			t.Fatalf("connected: %+v", s.Stats())
		case <-time.After(10 * time.Millisecond): // polling the agents' state
		}
	}
	publish := func(gen int64, image string) string {
		t.Helper()
		pod := schema.Pod{Name: "p", Spec: schema.PodSpec{Containers: []schema.Container{{Name: "c", Image: image}}}}
		schema.DefaultPodSpec(&pod.Spec)
		pod.Hash = schema.PodSpecHash(pod.Spec)
		for _, d := range devs {
			ds := schema.DesiredState{
				TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState},
				Device:   d.Name, Generation: gen, Store: "s1", Pods: []schema.Pod{pod},
			}
			payload, _ := json.Marshal(ds)
			if err := conn.Publish(ctx, topics.Device(d.Name, schema.TopicDesired), payload, true); err != nil {
				t.Fatal(err)
			}
		}
		return pod.Hash
	}
	// await waits until every device's report of hash satisfies its
	// condition.
	await := func(hash string, want map[string]func(schema.PodStatus) bool) {
		t.Helper()
		done := map[string]bool{}
		for len(done) < len(want) {
			select {
			case r := <-reports:
				if ok := want[r.device]; ok != nil && r.pod.Hash == hash && ok(r.pod) {
					done[r.device] = true
				}
			case <-ctx.Done():
				t.Fatalf("reports of %s: only %v", hash, done)
			}
		}
	}
	ready := func(p schema.PodStatus) bool { return p.Ready }
	v1 := publish(1, "registry.example.com/app:1")
	await(v1, map[string]func(schema.PodStatus) bool{good: ready, bad: ready}) // the image fails only as FailImage
	v2 := publish(2, badImage)
	await(v2, map[string]func(schema.PodStatus) bool{
		good: ready,
		bad: func(p schema.PodStatus) bool {
			return !p.Ready && len(p.Containers) == 1 && p.Containers[0].Reason == "ImagePullBackOff"
		},
	})
	// The refused pull stopped nothing: one start per device for v1, one
	// for the good device's v2.
	if st := s.Stats(); st.Starts != 3 || st.Stops != 1 {
		t.Errorf("stats %+v: want 3 starts and 1 stop", st)
	}
}

func TestFailImageConfig(t *testing.T) {
	base := hollow.Config{Broker: "tcp://x:1", Devices: devices(2), StateRoot: "/nonexistent"}
	for _, c := range []struct {
		name  string
		image string
		devs  []string
		want  string
	}{
		{"devices without an image", "", []string{"dev-a"}, "without failImage"},
		{"an unknown device", "img:bad", []string{"dev-z"}, `"dev-z" is not one of the devices`},
	} {
		cfg := base
		cfg.FailImage, cfg.FailDevices = c.image, c.devs
		if _, err := hollow.New(cfg, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	cfg := base
	cfg.FailImage, cfg.FailDevices = "img:bad", []string{"dev-b"}
	if _, err := hollow.New(cfg, nil); err != nil {
		t.Errorf("a valid failure: %v", err)
	}
}
