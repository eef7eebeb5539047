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
