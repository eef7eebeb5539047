package ingest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// decodeCases are payloads of every shape decode must treat as
// encoding/json does.
var decodeCases = []string{
	statusJSON("pi", 3, "arm64"),
	fullStatusJSON(),
	fullEventJSON(),
	`{"device":"pi","observedGeneration":1,"time":"2024-01-01T00:00:00Z","pods":[]}` + " \n\t",
	`{"DEVICE":"pi","ObservedGeneration":2,"time":"2024-01-01T02:00:00+02:00","pods":null}`,
	`{"device":"p\u0069","message":"tab\tquote\" é \ud83d\ude00","time":"2024-01-01T00:00:00.123456789Z","unknown":{"a":[1,2,{}]}}`,
	`{"device":"pi","device":"other","time":"2024-01-01T00:00:00Z"}`,
	`{"device":"pi","node":{"memoryTotalBytes":1e3},"time":"2024-01-01T00:00:00Z"}`,
	`{"device":"pi","node":null,"pods":[{"name":"web","containers":[{"name":"a","startedAt":null,"ready":null}]}]}`,
	`{"device":"pi","observedGeneration":"1"}`,
	`{"device":"pi","observedGeneration":1.5}`,
	`{"device":"pi","observedGeneration":9223372036854775808}`,
	// segmentio/encoding v0.5.4 wraps this around (longDigitRun).
	`{"device":"pi","node":{"memoryAvailableBytes":21000000000000000000}}`,
	`{"device":"pi","node":{"diskFreeBytes":18446744073709551615,"uptimeSeconds":-1}}`,
	`{"device":"pi","time":"2024-01-01 00:00:00"}`,
	`{"device":"pi","time":"2024-01-01T00:00:00"}`,
	`{"device":"pi","time":"\u0032024-01-01T00:00:00Z"}`,
	`{"device":"pi","pods":[{"restarts":-1,"ready":"yes"}]}`,
	`{"device":"pi","exitCode":2147483648}`,
	`{"device":"pi","exitCode":-3,"dropped":4,"time":"2024-01-01T00:00:00Z"}`,
	`{"device":"pi"} trailing`,
	`{"device":"pi"`,
	`{"device":"pi",}`,
	`{"device":"\xff\xfe"}`,
	`{"device":"pi"}{"device":"pi"}`,
	`[1,2]`,
	`null`,
	`"pi"`,
	``,
	` `,
	`{}`,
}

func fullStatusJSON() string {
	now := time.Date(2026, 11, 28, 17, 37, 45, 614388024, time.UTC)
	ready := true
	b, err := json.Marshal(schema.DeviceStatus{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "DeviceStatus"},
		Device:   "pi", ObservedGeneration: 3, Store: "3f2a9c0e4b1d", Time: now,
		Agent:     schema.AgentInfo{Version: "v0.9.0", OS: "linux", Arch: "arm64"},
		PublicKey: "q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQq83vEjRWeJA=",
		Node:      &schema.NodeInfo{Hostname: "pi", MemoryTotalBytes: 4 << 30, MemoryAvailBytes: 3 << 30, DiskTotalBytes: 32 << 30, DiskFreeBytes: 20 << 30, UptimeSeconds: 123456},
		Pods: []schema.PodStatus{{Name: "web", Hash: "8d4f1e2a9b7c", Phase: "Running", Ready: true,
			Containers: []schema.ContainerStatus{{Name: "app", Image: "registry.example.com/app:1.2.3", State: "running", StartedAt: &now, Ready: &ready}}}},
	})
	if err != nil {
		panic(err)
	}
	return string(b)
}

func fullEventJSON() string {
	code := int32(137)
	b, err := json.Marshal(schema.Event{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "Event"},
		ID:       "0123456789abcdef0123", Device: "pi", Time: time.Date(2026, 11, 28, 17, 37, 45, 0, time.UTC),
		Type: schema.EventWarning, Reason: "BackOff", Pod: "web", Container: "app", Message: "Back-off restarting", ExitCode: &code,
		LogTail: "line 1\nline 2\n", Dropped: 2,
	})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// sameAsStd fails t unless decode and encoding/json agree on payload:
// both refuse it, or both decode it to values that encode alike.
func sameAsStd[T any](t *testing.T, payload []byte) {
	t.Helper()
	var want, got T
	wantErr := json.Unmarshal(payload, &want)
	gotErr := decode(payload, &got)
	if (wantErr == nil) != (gotErr == nil) {
		t.Fatalf("%T of %q: encoding/json says %v, decode says %v", want, payload, wantErr, gotErr)
	}
	if wantErr != nil {
		if gotErr.Error() != wantErr.Error() {
			t.Fatalf("%T of %q: error %q, encoding/json's is %q", want, payload, gotErr, wantErr)
		}
		return
	}
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if string(w) != string(g) {
		t.Fatalf("%T of %q:\ndecode        %s\nencoding/json %s", want, payload, g, w)
	}
}

func TestDecodeAsEncodingJSON(t *testing.T) {
	for _, c := range decodeCases {
		sameAsStd[schema.DeviceStatus](t, []byte(c))
		sameAsStd[schema.Event](t, []byte(c))
	}
}

// TestDecodeLeavesPayload: the payload is stored as the device sent it,
// and the decoded strings that point into it are not changed by a later
// decode of another payload.
func TestDecodeLeavesPayload(t *testing.T) {
	payload := []byte(fullStatusJSON())
	before := string(payload)
	var st schema.DeviceStatus
	if err := decode(payload, &st); err != nil {
		t.Fatal(err)
	}
	if string(payload) != before {
		t.Fatal("decode changed the payload")
	}
	var other schema.DeviceStatus
	if err := decode([]byte(strings.ReplaceAll(before, `"pi"`, `"pj"`)), &other); err != nil {
		t.Fatal(err)
	}
	if st.Device != "pi" || other.Device != "pj" || st.Pods[0].Containers[0].Image != "registry.example.com/app:1.2.3" {
		t.Fatalf("decoded %q and %q", st.Device, other.Device)
	}
}

// FuzzDecode: on any payload, decode agrees with encoding/json.
//
//	go test -run XXX -fuzz FuzzDecode -fuzztime 60s ./hub/ingest/
func FuzzDecode(f *testing.F) {
	for _, c := range decodeCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		sameAsStd[schema.DeviceStatus](t, payload)
		sameAsStd[schema.Event](t, payload)
	})
}

// BenchmarkDecode: a converged device's status and one event, with decode
// and with encoding/json.
//
//	go test -run XXX -bench Decode ./hub/ingest/
func BenchmarkDecode(b *testing.B) {
	for _, c := range []struct {
		name    string
		payload []byte
		new     func() any
	}{
		{"status", []byte(fullStatusJSON()), func() any { return new(schema.DeviceStatus) }},
		{"event", []byte(fullEventJSON()), func() any { return new(schema.Event) }},
	} {
		b.Run(c.name+"/decode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := decode(c.payload, c.new()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := json.Unmarshal(c.payload, c.new()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestDecodeFitsSlices: the status the model keeps holds no room for more
// pods or containers than the device reported.
func TestDecodeFitsSlices(t *testing.T) {
	var st schema.DeviceStatus
	if err := decode([]byte(fullStatusJSON()), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Pods) != 1 || len(st.Pods[0].Containers) != 1 {
		t.Fatalf("decoded %d pods", len(st.Pods))
	}
	if cap(st.Pods) != 1 || cap(st.Pods[0].Containers) != 1 {
		t.Fatalf("capacities %d and %d, want 1 and 1", cap(st.Pods), cap(st.Pods[0].Containers))
	}
	var empty schema.DeviceStatus
	if err := decode([]byte(`{"device":"pi","pods":[]}`), &empty); err != nil {
		t.Fatal(err)
	}
	if empty.Pods == nil || cap(empty.Pods) != 0 {
		t.Fatalf("empty pods decoded as %#v (cap %d)", empty.Pods, cap(empty.Pods))
	}
}

// TestDecodeEventCopiesStrings: an event's strings do not point into its
// payload (the model keeps events, not their payloads).
func TestDecodeEventCopiesStrings(t *testing.T) {
	payload := []byte(fullEventJSON())
	var ev schema.Event
	if err := decode(payload, &ev); err != nil {
		t.Fatal(err)
	}
	for i := range payload {
		payload[i] = 'x'
	}
	if ev.Reason != "BackOff" || ev.Message != "Back-off restarting" || ev.Device != "pi" {
		t.Fatalf("the event changed with its payload: %+v", ev)
	}
}
