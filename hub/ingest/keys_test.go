package ingest

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// report returns the model's report of a device (its status and raw
// payload).
func (f *fixture) report(t *testing.T, name string) (*schema.DeviceStatus, []byte) {
	t.Helper()
	uid, _, _ := f.fm.Device(name)
	var st *schema.DeviceStatus
	var raw []byte
	f.fm.UpdateReport(name, uid, func(r *fleetmodel.Report, _ bool) bool {
		st, raw = r.Status, r.Raw
		return false
	})
	return st, raw
}

// storedStatus is the device's status as the store has it after a flush.
func (f *fixture) storedStatus(t *testing.T, name string) []byte {
	t.Helper()
	f.in.Flush(t.Context())
	var out []byte
	_ = f.st.View(t.Context(), func(tx *store.Txn) error {
		v, err := tx.Get(store.StatusKey(name))
		out = v
		return err
	})
	return out
}

func (f *fixture) reasons(name string) []string {
	uid, _, _ := f.fm.Device(name)
	var out []string
	for _, e := range f.fm.Events(name, uid) {
		out = append(out, e.Type+"/"+e.Reason)
	}
	return out
}

// TestStatusKeyBoundAtFirstReport: the first key a device reports is
// bound; a later status with another key (a stolen token's) is taken
// without it: its pods are, its key is not, in the model, the store and
// the stored status; it is counted, logged and raised as a Warning event,
// once per key per minute. After a rekey the next key is bound, with a
// Normal event.
func TestStatusKeyBoundAtFirstReport(t *testing.T) {
	f := newFixture(t, "pi")
	own, thief, next := newPublicKey(t), newPublicKey(t), newPublicKey(t)
	f.in.Handle(topicPrefix+"pi/status", []byte(statusWithKey("pi", 1, own)))
	if rec, err := f.st.DeviceKey(t.Context(), "pi"); err != nil || rec.PublicKey != own {
		t.Fatalf("after the first report: %+v, %v", rec, err)
	}

	for i, gen := range []int64{2, 3} {
		f.clock.add(1)
		f.in.Handle(topicPrefix+"pi/status", []byte(statusWithKey("pi", gen, thief)))
		st, raw := f.report(t, "pi")
		if st == nil || st.ObservedGeneration != gen || st.PublicKey != own {
			t.Fatalf("report after a thief's status: %+v", st)
		}
		if bytes.Contains(raw, []byte(thief)) || !bytes.Contains(raw, []byte(own)) {
			t.Errorf("the report's payload carries the refused key: %s", raw)
		}
		if got := counter(t, f.m.DeviceKeyRefused); got != float64(i+1) {
			t.Errorf("fleet_hub_device_key_refused_total = %v, want %d", got, i+1)
		}
	}
	if got := strings.Join(f.reasons("pi"), ","); got != "Warning/"+ReasonDeviceKeyRefused {
		t.Errorf("events: %s, want one refusal (the second of the same key within a minute is counted, not raised)", got)
	}
	if s := f.storedStatus(t, "pi"); bytes.Contains(s, []byte(thief)) || !bytes.Contains(s, []byte(own)) {
		t.Errorf("stored status: %s", s)
	}
	if rec, _ := f.st.DeviceKey(t.Context(), "pi"); rec.PublicKey != own {
		t.Errorf("bound key after the refusal: %q", rec.PublicKey)
	}

	// The real key again, then a rekey and the device's new key.
	f.in.Handle(topicPrefix+"pi/status", []byte(statusWithKey("pi", 4, own)))
	if _, err := f.st.RekeyDevice(t.Context(), "pi"); err != nil {
		t.Fatal(err)
	}
	f.in.Handle(topicPrefix+"pi/status", []byte(statusWithKey("pi", 5, next)))
	if st, _ := f.report(t, "pi"); st.PublicKey != next {
		t.Errorf("after rekey, the report carries %q", st.PublicKey)
	}
	if rec, _ := f.st.DeviceKey(t.Context(), "pi"); rec != (store.DeviceKeyRecord{PublicKey: next}) {
		t.Errorf("after rekey: %+v", rec)
	}
	if got := f.reasons("pi"); len(got) != 2 || got[1] != "Normal/"+ReasonDeviceKeyRebound {
		t.Errorf("events after rekey: %v", got)
	}
	// Accepted once: the old key now is refused.
	f.in.Handle(topicPrefix+"pi/status", []byte(statusWithKey("pi", 6, own)))
	if st, _ := f.report(t, "pi"); st.PublicKey != next || st.ObservedGeneration != 6 {
		t.Errorf("the old key after the rekey: %+v", st)
	}
}

// TestStatusKeyEnrolledKeyWins: a device that enrolled with a key has it
// bound before any status: a first status with another key is refused.
func TestStatusKeyEnrolledKeyWins(t *testing.T) {
	f := newFixture(t, "pi")
	enrolled, thief := newPublicKey(t), newPublicKey(t)
	if _, err := f.st.Write(t.Context(), func(tx *store.Txn) error {
		return tx.Set(store.DeviceKeyKey("pi"), []byte(enrolled))
	}); err != nil {
		t.Fatal(err)
	}
	f.in.Handle(topicPrefix+"pi/status", []byte(statusWithKey("pi", 1, thief)))
	if st, _ := f.report(t, "pi"); st == nil || st.PublicKey != enrolled {
		t.Errorf("report: %+v", st)
	}
	if got := counter(t, f.m.DeviceKeyRefused); got != 1 {
		t.Errorf("refused = %v", got)
	}
}

// TestStatusKeyBadInput: a malformed key and a key of 1 MB refuse the
// status, name the field or size, store nothing, bind nothing, keep
// nothing in memory.
func TestStatusKeyBadInput(t *testing.T) {
	f := newFixture(t, "pi")
	f.in.opts.MaxPayload = DefaultMaxPayload
	big := strings.Repeat("A", 1<<20)
	for _, tc := range []struct{ name, key string }{
		{"malformed", "not a key!"},
		{"short", "AAAA"},
		{"1 MB", big},
		{"just under the payload limit", big[:DefaultMaxPayload-600]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := counter(t, f.m.Malformed.WithLabelValues(schema.TopicStatus))
			f.in.Handle(topicPrefix+"pi/status", []byte(statusWithKey("pi", 1, tc.key)))
			if got := counter(t, f.m.Malformed.WithLabelValues(schema.TopicStatus)); got != before+1 {
				t.Errorf("malformed count %v → %v", before, got)
			}
			if st, raw := f.report(t, "pi"); st != nil || raw != nil {
				t.Errorf("the model kept a report: %.100s", raw)
			}
			if s := f.storedStatus(t, "pi"); s != nil {
				t.Errorf("stored: %.100s", s)
			}
			if rec, _ := f.st.DeviceKey(t.Context(), "pi"); rec.PublicKey != "" {
				t.Errorf("bound a bad key: %.40s", rec.PublicKey)
			}
			if n := len(f.in.keys.bound); n != 0 {
				t.Errorf("the key book holds %d entries", n)
			}
		})
	}
	// The log names the field.
	err := schema.ValidateDeviceStatus(&schema.DeviceStatus{Device: "pi", PublicKey: "AAAA", Pods: []schema.PodStatus{}})
	if err == nil || !strings.Contains(err.Error(), "publicKey") {
		t.Errorf("validation error %v does not name publicKey", err)
	}
}

// TestLoadKeepsBoundKey: a stored status carrying another key than the
// bound one (stored before keys were bound) is loaded with the bound key.
func TestLoadKeepsBoundKey(t *testing.T) {
	f := newFixture(t, "pi")
	bound, other := newPublicKey(t), newPublicKey(t)
	if _, err := f.st.Write(t.Context(), func(tx *store.Txn) error {
		if err := tx.Set(store.DeviceKeyKey("pi"), []byte(bound)); err != nil {
			return err
		}
		return tx.Set(store.StatusKey("pi"), []byte(statusWithKey("pi", 1, other)))
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.in.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, raw := f.report(t, "pi")
	if st == nil || st.PublicKey != bound || bytes.Contains(raw, []byte(other)) {
		t.Errorf("loaded report %+v %s", st, raw)
	}
}

// BenchmarkKeyCheck is the key check alone, for a status carrying its
// device's bound key (the hot path: every status of every agent).
func BenchmarkKeyCheck(b *testing.B) {
	f := newFixture(b, "pi")
	key := newPublicKey(b)
	f.in.Handle(topicPrefix+"pi/status", []byte(statusWithKey("pi", 1, key)))
	uid, _, _ := f.fm.Device("pi")
	st := &schema.DeviceStatus{Device: "pi", PublicKey: key}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, _, ok := f.in.checkKey("pi", uid, st, nil); !ok {
			b.Fatal("refused")
		}
	}
}
