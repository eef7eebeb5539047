package hollow_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/scale/hollow"
)

// signedDesired is a desired state for device with one pod (env CHANGE
// = change), signed with key.
func signedDesired(t *testing.T, key ed25519.PrivateKey, device string, gen int64, change string) ([]byte, string) {
	t.Helper()
	ds := schema.DesiredState{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState},
		Device:   device, Generation: gen, Store: "s1",
		Pods: []schema.Pod{{Name: "p", Spec: schema.PodSpec{Containers: []schema.Container{{
			Name: "c", Image: "img:1", Env: []schema.EnvVar{{Name: "CHANGE", Value: change}},
		}}}}},
	}
	schema.DefaultPodSpec(&ds.Pods[0].Spec)
	ds.Pods[0].Hash = schema.PodSpecHash(ds.Pods[0].Spec)
	canonical, err := json.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := schema.SignDesiredState(canonical, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	return payload, ds.Pods[0].Hash
}

// TestLiteAgents: lite agents over real TCP to a real broker connect with
// their own credentials, say "online", verify each signed desired state
// against the key they pinned (a state signed by another key changes
// nothing), start the pod once after the runtime's latency and report it
// ready at its hash with two events; a repeated state is a duplicate, an
// older one stale; stopping them says "offline".
func TestLiteAgents(t *testing.T) {
	devs := devices(3)
	b := startBroker(t, devs)
	conn := b.InlineConn()
	defer conn.Close()
	topics := schema.Topics{}
	type report struct {
		device, hash string
		gen          int64
		ready        bool
	}
	statuses := make(chan report, 100)
	events := make(chan string, 100)
	online := make(chan string, 100)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for filter, f := range map[string]func(string, []byte){
		topics.DeviceFilter(schema.TopicStatus): func(_ string, p []byte) {
			var st schema.DeviceStatus
			if json.Unmarshal(p, &st) != nil {
				return
			}
			r := report{device: st.Device, gen: st.ObservedGeneration}
			if len(st.Pods) == 1 {
				r.hash, r.ready = st.Pods[0].Hash, st.Pods[0].Ready
			}
			statuses <- r
		},
		topics.DeviceFilter(schema.TopicEvents): func(_ string, p []byte) {
			var ev schema.Event
			if json.Unmarshal(p, &ev) == nil && ev.ID != "" {
				events <- ev.Reason
			}
		},
		topics.DeviceFilter(schema.TopicOnline): func(topic string, p []byte) { online <- string(p) },
	} {
		if err := conn.Subscribe(ctx, filter, f); err != nil {
			t.Fatal(err)
		}
	}
	s, err := hollow.New(hollow.Config{
		Mode: hollow.ModeLite, Broker: "tcp://" + b.Addr().String(), Devices: devs,
		StartLatency: 5 * time.Millisecond, KeepAlive: time.Second,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			s.Stop()
		}
	}()
	for range devs {
		select {
		case p := <-online:
			if p != schema.Online {
				t.Fatalf("online topic: %q", p)
			}
		case <-ctx.Done():
			t.Fatal("no online announcement")
		}
	}
	_, key, _ := ed25519.GenerateKey(nil)
	_, other, _ := ed25519.GenerateKey(nil)
	publish := func(device string, payload []byte) {
		t.Helper()
		if err := conn.Publish(ctx, topics.Device(device, schema.TopicDesired), payload, true); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{}
	for _, d := range devs {
		p, hash := signedDesired(t, key, d.Name, 2, "a")
		want[d.Name] = hash
		publish(d.Name, p)
	}
	for len(want) > 0 {
		select {
		case r := <-statuses:
			if r.gen == 2 && r.ready && r.hash == want[r.device] {
				delete(want, r.device)
			}
		case <-ctx.Done():
			t.Fatalf("not converged: %v", want)
		}
	}
	// The pinned key: a state signed by another key is refused.
	forged, _ := signedDesired(t, other, devs[0].Name, 3, "forged")
	publish(devs[0].Name, forged)
	same, _ := signedDesired(t, key, devs[1].Name, 2, "a")
	publish(devs[1].Name, same)
	older, _ := signedDesired(t, key, devs[2].Name, 1, "old")
	publish(devs[2].Name, older)
	var st hollow.Stats
	if err := pollStats(ctx, s, func(x hollow.Stats) bool { st = x; return x.Invalid+x.Duplicate+x.Stale == 3 }); err != nil {
		t.Fatalf("stats %+v: want one invalid, one duplicate, one stale", st)
	}
	if st.Invalid != 1 || st.Duplicate != 1 || st.Stale != 1 || st.Accepted != 3 || st.Starts != 3 || st.Connects != 3 || st.Connected != 3 {
		t.Errorf("stats %+v: want 3 accepted, 3 starts, 3 connects, 1 invalid, 1 duplicate, 1 stale", st)
	}
	if starts := s.LastStarts(); len(starts) != 3 || starts[0] == 0 {
		t.Errorf("last starts %v", starts)
	}
	got := map[string]int{}
	for got["Created"]+got["Started"] < 6 {
		select {
		case r := <-events:
			got[r]++
		case <-ctx.Done():
			t.Fatalf("events %v: want 3 Created and 3 Started", got)
		}
	}
	if got["Created"] != 3 || got["Started"] != 3 {
		t.Errorf("events %v: want 3 Created and 3 Started", got)
	}
	s.Stop()
	stopped = true
	for range devs {
		select {
		case p := <-online:
			if p != schema.Offline {
				t.Errorf("online topic at stop: %q", p)
			}
		case <-ctx.Done():
			t.Fatal("no offline announcement")
		}
	}
}

// pollStats polls the simulator's stats until ok (the agents work on
// their own goroutines).
func pollStats(ctx context.Context, s *hollow.Simulator, ok func(hollow.Stats) bool) error {
	for !ok(s.Stats()) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}
