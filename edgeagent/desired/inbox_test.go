package desired

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func payload(t testing.TB, device, store string, gen int64) []byte {
	t.Helper()
	b, err := json.Marshal(schema.DesiredState{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState},
		Device:   device, Generation: gen, Store: store,
		Pods: []schema.Pod{{Name: "web", Spec: schema.PodSpec{Containers: []schema.Container{{Name: "c", Image: "nginx"}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestOffer(t *testing.T) {
	current := &schema.DesiredState{Device: "dev1", Generation: 5, Store: "s1"}
	tests := []struct {
		name    string
		payload []byte
		want    Outcome
		invalid bool
	}{
		{"newer generation", payload(t, "dev1", "s1", 6), Accepted, false},
		{"same generation is a no-op", payload(t, "dev1", "s1", 5), Duplicate, false},
		{"older generation is stale", payload(t, "dev1", "s1", 4), Stale, false},
		{"other store accepts any generation", payload(t, "dev1", "s2", 1), Accepted, false},
		{"other device is ignored", payload(t, "dev2", "s1", 9), OtherDevice, false},
		{"malformed JSON", []byte(`{"apiVersion":`), Invalid, true},
		{"not an object", []byte(`[1,2]`), Invalid, true},
		{"fails validation", []byte(`{"apiVersion":"fleet/v1","kind":"DesiredState","device":"dev1","generation":9,"pods":[{"name":"Bad Name","spec":{"containers":[]}}]}`), Invalid, true},
		{"wrong kind", []byte(`{"apiVersion":"fleet/v1","kind":"Deployment","device":"dev1","generation":9,"pods":[]}`), Invalid, true},
		{"empty payload clears", nil, Cleared, false},
		{"whitespace payload clears", []byte(" \n"), Cleared, false},
		{"unknown fields from a newer hub are tolerated", []byte(`{"apiVersion":"fleet/v1","kind":"DesiredState","device":"dev1","generation":7,"store":"s1","pods":[],"futureField":1}`), Accepted, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := New("dev1", current)
			got, _, err := in.Offer(tt.payload)
			if got != tt.want {
				t.Fatalf("Offer = %v (%v), want %v", got, err, tt.want)
			}
			if tt.invalid != (err != nil) || (err != nil && !errors.Is(err, schema.ErrInvalid)) {
				t.Fatalf("err = %v", err)
			}
			_, _, pending := in.Take()
			if pending != (tt.want == Accepted) {
				t.Fatalf("pending = %v for %v", pending, got)
			}
		})
	}
}

func TestOfferKeepsOnlyLatest(t *testing.T) {
	in := New("dev1", nil)
	for _, gen := range []int64{1, 3, 2} {
		in.Offer(payload(t, "dev1", "s1", gen))
	}
	select {
	case <-in.Wake():
	default:
		t.Fatal("no wake")
	}
	select {
	case <-in.Wake():
		t.Fatal("wakes are not coalesced")
	default:
	}
	ds, _, ok := in.Take()
	if !ok || ds.Generation != 3 {
		t.Fatalf("Take = %+v", ds)
	}
	if _, _, ok := in.Take(); ok {
		t.Fatal("slot not cleared")
	}
	if out, _, _ := in.Offer(payload(t, "dev1", "s1", 3)); out != Duplicate {
		t.Fatalf("re-delivered retained copy = %v", out)
	}
}

func TestOfferDefaultsPodSpecs(t *testing.T) {
	in := New("dev1", nil)
	_, ds, err := in.Offer(payload(t, "dev1", "s1", 1))
	if err != nil {
		t.Fatal(err)
	}
	if ds.Pods[0].Spec.RestartPolicy != schema.RestartAlways || ds.Pods[0].Spec.Containers[0].ImagePullPolicy != schema.PullIfNotPresent {
		t.Fatalf("not defaulted: %+v", ds.Pods[0].Spec)
	}
}

// A retained desired state comes again on every reconnect: the same bytes
// are a duplicate (not decoded again), and only the latest state's bytes
// are remembered, so an older payload is still stale.
func TestOfferSameBytesAgain(t *testing.T) {
	in := New("dev1", &schema.DesiredState{Device: "dev1", Generation: 5, Store: "s1"})
	p5, p6 := payload(t, "dev1", "s1", 5), payload(t, "dev1", "s1", 6)
	for i, c := range []struct {
		payload []byte
		want    Outcome
		gen     int64
	}{
		{p5, Duplicate, 5}, // the persisted state, redelivered after a restart
		{p5, Duplicate, 5}, // again: from the remembered bytes
		{p6, Accepted, 6},
		{p6, Duplicate, 6},
		{append([]byte(" "), p6...), Duplicate, 6}, // other bytes, same state
		{p5, Stale, 5},
		{payload(t, "dev2", "s1", 6), OtherDevice, 6},
		{p6, Duplicate, 6},
	} {
		out, ds, err := in.Offer(c.payload)
		if out != c.want || err != nil || ds == nil || ds.Generation != c.gen {
			t.Fatalf("offer %d: %v, %+v, %v; want %v generation %d", i, out, ds, err, c.want, c.gen)
		}
	}
	if ds, _, ok := in.Take(); !ok || ds.Generation != 6 {
		t.Fatalf("pending = %+v, %v; want generation 6", ds, ok)
	}
}

func BenchmarkOfferRedelivered(b *testing.B) {
	p := payload(b, "dev1", "s1", 6)
	in := New("dev1", nil)
	if out, _, _ := in.Offer(p); out != Accepted {
		b.Fatal(out)
	}
	for b.Loop() {
		if out, _, _ := in.Offer(p); out != Duplicate {
			b.Fatal(out)
		}
	}
}

// FuzzOffer: whatever arrives on the desired topic, Offer does not panic,
// and what it accepts is a valid state for this device, newer than the
// last, handed to the reconciler with the very bytes received.
func FuzzOffer(f *testing.F) {
	f.Add(payload(f, "dev1", "s1", 6))
	f.Add(payload(f, "dev2", "s1", 6))
	f.Add([]byte(`{"apiVersion":"fleet/v1","kind":"DesiredState","device":"dev1","generation":9,"pods":[{"name":"web","spec":{"containers":[{"name":"c","image":"nginx","ports":[{"containerPort":80}],"env":[{"name":"A","value":"b"}],"resources":{"limits":{"memory":"64Mi","cpu":"500m"}}}]}}]}`))
	f.Add([]byte(`{"apiVersion":"fleet/v1","kind":"DesiredState","device":"dev1","generation":-1,"pods":null}`))
	f.Add([]byte(`{"device":"dev1","generation":1e400}`))
	f.Add([]byte("  \n"))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := New("dev1", &schema.DesiredState{Device: "dev1", Generation: 5, Store: "s1"})
		out, ds, err := in.Offer(b)
		if (err != nil) != (out == Invalid) {
			t.Fatalf("outcome %v with error %v", out, err)
		}
		if out != Accepted {
			if _, _, ok := in.Take(); ok {
				t.Fatalf("outcome %v left a pending state", out)
			}
			return
		}
		if ds.Device != "dev1" {
			t.Fatalf("accepted a state for %q", ds.Device)
		}
		if verr := schema.ValidateDesiredState(ds); verr != nil {
			t.Fatalf("accepted an invalid state: %v", verr)
		}
		if ds.Store == "s1" && ds.Generation <= 5 {
			t.Fatalf("accepted generation %d of the store it has applied 5 from", ds.Generation)
		}
		got, raw, ok := in.Take()
		if !ok || got != ds || string(raw) != string(b) {
			t.Fatalf("Take = %v, %q, %v; want the accepted state and its bytes", got, raw, ok)
		}
		if again, _, _ := in.Offer(b); again != Duplicate {
			t.Fatalf("the same bytes again: %v, want Duplicate", again)
		}
	})
}

// TestLatest: Latest names the newest state accepted, or the one the
// inbox started from, and is unmoved by what Offer refuses.
func TestLatest(t *testing.T) {
	in := New("dev1", nil)
	if _, _, ok := in.Latest(); ok {
		t.Fatal("a new inbox without a current state has a latest one")
	}
	steps := []struct {
		payload []byte
		store   string
		gen     int64
	}{
		{payload(t, "dev1", "s1", 3), "s1", 3},
		{payload(t, "dev1", "s1", 2), "s1", 3}, // stale
		{payload(t, "dev2", "s9", 9), "s1", 3}, // another device
		{[]byte(`{"apiVersion":`), "s1", 3},    // invalid
		{payload(t, "dev1", "s2", 1), "s2", 1}, // a new store
		{nil, "s2", 1},                         // cleared
	}
	for i, st := range steps {
		in.Offer(st.payload)
		if store, gen, ok := in.Latest(); !ok || store != st.store || gen != st.gen {
			t.Fatalf("step %d: Latest = %s/%d %v, want %s/%d", i, store, gen, ok, st.store, st.gen)
		}
	}
	from := New("dev1", &schema.DesiredState{Device: "dev1", Store: "s1", Generation: 5})
	if store, gen, ok := from.Latest(); !ok || store != "s1" || gen != 5 {
		t.Fatalf("Latest of an inbox started at s1/5 = %s/%d %v", store, gen, ok)
	}
}

// BenchmarkOfferNew: a new desired state, the scale suite's pod, signed
// as the hub signs it, judged on a goroutine of its own as the MQTT
// client hands each message to one (whose stack starts small).
func BenchmarkOfferNew(b *testing.B) {
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		b.Fatal(err)
	}
	spec := schema.PodSpec{Containers: []schema.Container{{
		Name: "app", Image: "registry.example.com/fleet/scale-app:1.0.0", Args: []string{"--listen", ":8080"},
		Resources: schema.Resources{Limits: schema.ResourceList{Memory: "64Mi", CPU: "250m"}},
	}}}
	schema.DefaultPodSpec(&spec)
	pod := schema.Pod{Name: "scale", Spec: spec, Hash: schema.PodSpecHash(spec)}
	payloads := make([][]byte, b.N)
	for i := range payloads {
		canonical, err := json.Marshal(schema.DesiredState{
			TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState},
			Device:   "dev1", Generation: int64(i + 1), Store: "00000000-0000-4000-8000-000000000000",
			Pods: []schema.Pod{pod},
		})
		if err != nil {
			b.Fatal(err)
		}
		if payloads[i], err = schema.SignDesiredState(canonical, key, nil); err != nil {
			b.Fatal(err)
		}
	}
	in := New("dev1", nil)
	done := make(chan Outcome)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		go func() {
			out, _, _ := in.Offer(payloads[i])
			done <- out
		}()
		if out := <-done; out != Accepted {
			b.Fatal(out)
		}
	}
}
