package store

import (
	"bytes"
	"encoding/base64"
	"errors"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func testKey(b byte) string {
	return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32))
}

// TestDeviceKeyBinding: the first key a device reports is bound; another
// is refused and nothing is written; after RekeyDevice the next other key
// is bound once; the binding survives a reopened store and goes with the
// device; a key for another device of the same name (uid) or a malformed
// key is refused.
func TestDeviceKeyBinding(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, Options{Dir: dir})
	ctx := ctxT(t)
	obj, err := s.Create(ctx, newDevice("pi", nil), false)
	if err != nil {
		t.Fatal(err)
	}
	uid := obj.GetMetadata().UID
	k1, k2, k3 := testKey(1), testKey(2), testKey(3)
	step := func(what, key string, want KeyVerdict, wantBound string) {
		t.Helper()
		v, bound, err := s.BindDeviceKey(ctx, "pi", uid, key)
		if err != nil || v != want || bound != wantBound {
			t.Errorf("%s: BindDeviceKey = %v, %q, %v; want %v, %q", what, v, bound, err, want, wantBound)
		}
	}
	step("first key", k1, KeyBoundFirst, k1)
	step("same key", k1, KeyKept, k1)
	rev := revision(t, s)
	step("another key", k2, KeyRefused, k1)
	if r := revision(t, s); r != rev {
		t.Errorf("a refused key wrote to the store: revision %d → %d", rev, r)
	}
	if _, _, err := s.BindDeviceKey(ctx, "pi", uid, "bad"); !errors.Is(err, schema.ErrInvalid) {
		t.Errorf("malformed key: %v", err)
	}
	if _, _, err := s.BindDeviceKey(ctx, "pi", "other-uid", k2); !errors.Is(err, ErrNotFound) {
		t.Errorf("another device of the name: %v", err)
	}
	if _, err := s.RekeyDevice(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("rekey of an unknown device: %v", err)
	}
	rec, err := s.RekeyDevice(ctx, "pi")
	if err != nil || rec.PublicKey != k1 || !rec.Rekey {
		t.Fatalf("RekeyDevice = %+v, %v", rec, err)
	}
	step("the old key after rekey", k1, KeyKept, k1)
	step("the next key after rekey", k2, KeyRebound, k2)
	step("a third key", k3, KeyRefused, k2)

	// Across a restart.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, Options{Dir: dir})
	if rec, err := s.DeviceKey(ctx, "pi"); err != nil || rec != (DeviceKeyRecord{PublicKey: k2}) {
		t.Errorf("after reopening: %+v, %v", rec, err)
	}
	step("a third key after the restart", k3, KeyRefused, k2)

	// Deleted with the device, rekey mark included.
	if _, err := s.RekeyDevice(ctx, "pi"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, schema.KindDevice, "pi", "", false); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.DeviceKey(ctx, "pi"); err != nil || rec != (DeviceKeyRecord{}) {
		t.Errorf("after delete: %+v, %v", rec, err)
	}
}
