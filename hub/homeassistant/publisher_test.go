package homeassistant_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/homeassistant"
)

// fakeBroker is an in-memory retained store with a subscription that sees
// every publish, as a broker echoes them to the hub's own subscription.
type fakeBroker struct {
	mu        sync.Mutex
	retained  map[string][]byte
	handlers  []func(string, []byte)
	fail      bool
	publishes int
}

var _ homeassistant.Conn = (*fakeBroker)(nil)

func newFakeBroker() *fakeBroker { return &fakeBroker{retained: map[string][]byte{}} }

func (b *fakeBroker) Publish(_ context.Context, topic string, payload []byte, retained bool) error {
	b.mu.Lock()
	if b.fail {
		b.mu.Unlock()
		return errors.New("fake broker: not connected")
	}
	b.publishes++
	if retained {
		if len(payload) == 0 {
			delete(b.retained, topic)
		} else {
			b.retained[topic] = payload
		}
	}
	hs := append([]func(string, []byte){}, b.handlers...)
	b.mu.Unlock()
	for _, h := range hs {
		h(topic, payload)
	}
	return nil
}

func (b *fakeBroker) Subscribe(_ context.Context, filter string, h func(string, []byte)) error {
	b.mu.Lock()
	b.handlers = append(b.handlers, h)
	held := map[string][]byte{}
	for k, v := range b.retained {
		held[k] = v
	}
	b.mu.Unlock()
	for k, v := range held { // retained messages on subscribe
		h(k, v)
	}
	return nil
}

func (b *fakeBroker) topics(device string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for k := range b.retained {
		if strings.Contains(k, "/fleet_"+device+"/") {
			out = append(out, k)
		}
	}
	return out
}

// fakeDevices is a device set a test edits.
type fakeDevices struct {
	mu   sync.Mutex
	list []homeassistant.Device
}

func (f *fakeDevices) get() []homeassistant.Device {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]homeassistant.Device(nil), f.list...)
}

func (f *fakeDevices) set(ds ...homeassistant.Device) {
	f.mu.Lock()
	f.list = ds
	f.mu.Unlock()
}

func newPublisher(t *testing.T, b *fakeBroker, devs *fakeDevices) *homeassistant.Publisher {
	t.Helper()
	p, err := homeassistant.NewPublisher(homeassistant.PublisherOptions{Conn: b, Devices: devs.get})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Subscribe(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPublisherAddDeleteAndRestart(t *testing.T) {
	ctx := context.Background()
	b := newFakeBroker()
	devs := &fakeDevices{}
	a := homeassistant.Device{Name: "a", UID: "ua"}
	devs.set(a)
	p := newPublisher(t, b, devs)
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(b.topics("a")); n != 5 {
		t.Fatalf("device a: %d configs, want 5", n)
	}
	// A device added later gets its configs; an unchanged one is not
	// published again.
	before := b.publishes
	devs.set(a, homeassistant.Device{Name: "b", UID: "ub"})
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if len(b.topics("b")) != 5 || b.publishes-before != 5 {
		t.Fatalf("device b: %d configs after %d publishes", len(b.topics("b")), b.publishes-before)
	}
	// A new report with memory adds a sensor.
	devs.set(homeassistant.Device{Name: "a", UID: "ua", Node: map[string]bool{"memoryAvailableBytes": true}}, homeassistant.Device{Name: "b", UID: "ub"})
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(b.topics("a")); n != 6 {
		t.Fatalf("device a with memory: %d configs, want 6", n)
	}
	// Deleting a device clears every config of it.
	devs.set(homeassistant.Device{Name: "b", UID: "ub"})
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if left := b.topics("a"); len(left) != 0 {
		t.Fatalf("deleted device a keeps %v", left)
	}
	// A new hub process (a new publisher) on a broker that kept the
	// configs of a device deleted meanwhile clears them, and publishes
	// the same unique_ids for the others.
	uids := uniqueIDs(t, b, "b")
	devs.set()
	p2 := newPublisher(t, b, &fakeDevices{list: []homeassistant.Device{{Name: "c", UID: "uc"}}})
	if err := p2.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if left := b.topics("b"); len(left) != 0 {
		t.Fatalf("configs of b, deleted while the hub was down, kept: %v", left)
	}
	p3 := newPublisher(t, b, &fakeDevices{list: []homeassistant.Device{{Name: "b", UID: "ub"}}})
	if err := p3.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := uniqueIDs(t, b, "b"); strings.Join(got, ",") != strings.Join(uids, ",") {
		t.Fatalf("unique_ids changed across publishers: %v, then %v", uids, got)
	}
}

func uniqueIDs(t *testing.T, b *fakeBroker, device string) []string {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for topic, payload := range b.retained {
		if !strings.Contains(topic, "/fleet_"+device+"/") {
			continue
		}
		var p homeassistant.Payload
		if err := json.Unmarshal(payload, &p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p.UniqueID)
	}
	sortStrings(out)
	return out
}

func sortStrings(s []string) {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
}

func TestPublisherLeavesOtherConfigs(t *testing.T) {
	ctx := context.Background()
	b := newFakeBroker()
	// Another integration's config, and one of a hub on another prefix.
	b.retained["homeassistant/sensor/kitchen/temp/config"] = []byte(`{"name":"t"}`)
	b.retained["homeassistant/sensor/fleet_x/online/config"] = []byte(`{"availability":[{"topic":"other/v1/devices/x/online"}]}`)
	p := newPublisher(t, b, &fakeDevices{})
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if len(b.retained) != 2 {
		t.Fatalf("publisher touched configs that are not its own: %v", b.retained)
	}
}

func TestPublisherRetriesAfterFailure(t *testing.T) {
	ctx := context.Background()
	b := newFakeBroker()
	p := newPublisher(t, b, &fakeDevices{list: []homeassistant.Device{{Name: "a", UID: "ua"}}})
	b.fail = true
	if err := p.Sync(ctx); err == nil {
		t.Fatal("Sync on a failing broker: no error")
	}
	b.fail = false
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(b.topics("a")); n != 5 {
		t.Fatalf("%d configs after the retry, want 5", n)
	}
	// After a reconnect to a broker that lost everything, RepublishAll
	// publishes every config again.
	b.mu.Lock()
	b.retained = map[string][]byte{}
	b.mu.Unlock()
	p.RepublishAll()
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(b.topics("a")); n != 5 {
		t.Fatalf("%d configs after RepublishAll, want 5", n)
	}
}

func TestNewPublisherNeedsConnAndDevices(t *testing.T) {
	if _, err := homeassistant.NewPublisher(homeassistant.PublisherOptions{}); err == nil {
		t.Fatal("no error without Conn and Devices")
	}
}

// BenchmarkPublisherSteadyPass is one pass over 10,000 unchanged devices
// (the cost of the 2 s poll on a large fleet); BenchmarkPublisherFirstPass
// publishes all their configs.
func BenchmarkPublisherSteadyPass(b *testing.B) {
	p, _ := benchPublisher(b, 10000)
	ctx := context.Background()
	if err := p.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if err := p.Sync(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPublisherFirstPass(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		p, _ := benchPublisher(b, 10000)
		b.StartTimer()
		if err := p.Sync(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func benchPublisher(b *testing.B, n int) (*homeassistant.Publisher, *fakeBroker) {
	devs := make([]homeassistant.Device, n)
	for i := range devs {
		name := "pi-" + strconv.Itoa(i)
		devs[i] = homeassistant.Device{Name: name, UID: "uid-" + name, AgentVersion: "v1", OS: "linux", Arch: "arm64",
			Node: map[string]bool{"memoryAvailableBytes": true, "diskFreeBytes": true}}
	}
	fb := newFakeBroker()
	p, err := homeassistant.NewPublisher(homeassistant.PublisherOptions{Conn: fb, Devices: func() []homeassistant.Device { return devs }})
	if err != nil {
		b.Fatal(err)
	}
	return p, fb
}

func TestPublisherRepairsAChangedConfig(t *testing.T) {
	ctx := context.Background()
	b := newFakeBroker()
	p := newPublisher(t, b, &fakeDevices{list: []homeassistant.Device{{Name: "a", UID: "ua"}}})
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	topic := b.topics("a")[0]
	b.mu.Lock()
	good := b.retained[topic]
	b.mu.Unlock()
	// Someone (another hub of an older release, an operator) overwrites
	// one config, then another one clears one.
	stale := []byte(strings.Replace(string(good), `"name":`, `"qos":1,"name":`, 1))
	if err := b.Publish(ctx, topic, stale, true); err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	got := b.retained[topic]
	b.mu.Unlock()
	if string(got) != string(good) {
		t.Fatalf("overwritten config not repaired: %s", got)
	}
	if err := b.Publish(ctx, topic, nil, true); err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(b.topics("a")); n != 5 {
		t.Fatalf("cleared config not republished: %d configs", n)
	}
}

func TestPublisherRunWakes(t *testing.T) {
	b := newFakeBroker()
	devs := &fakeDevices{}
	p, err := homeassistant.NewPublisher(homeassistant.PublisherOptions{Conn: b, Devices: devs.get, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	devs.set(homeassistant.Device{Name: "a", UID: "ua"})
	deadline := time.Now().Add(10 * time.Second)
	for len(b.topics("a")) != 5 {
		if time.Now().After(deadline) {
			t.Fatal("Wake did not bring a pass")
		}
		p.Wake() // the hourly tick never comes: only Wake makes passes
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
