package store

import (
	"context"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// uidIn returns what DeviceUID says in a write transaction (the in-memory
// index) and in a read transaction (the stored object).
func uidIn(t *testing.T, s *Store, name string) (idx, stored string, idxOK, storedOK bool) {
	t.Helper()
	if _, err := s.Write(context.Background(), func(tx *Txn) error {
		idx, idxOK = tx.DeviceUID(name)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.View(context.Background(), func(tx *Txn) error {
		stored, storedOK = tx.DeviceUID(name)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return idx, stored, idxOK, storedOK
}

func TestDeviceUIDIndex(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	check := func(name string, wantOK bool) string {
		t.Helper()
		idx, stored, idxOK, storedOK := uidIn(t, s, name)
		if idxOK != wantOK || storedOK != wantOK || idx != stored || wantOK && idx == "" {
			t.Fatalf("%s: index %q %v, stored %q %v, want exists=%v", name, idx, idxOK, stored, storedOK, wantOK)
		}
		return idx
	}
	check("pi", false)
	o, err := s.Create(ctx, &schema.Device{Metadata: schema.ObjectMeta{Name: "pi"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if uid := check("pi", true); uid != o.GetMetadata().UID {
		t.Fatalf("uid %q, created %q", uid, o.GetMetadata().UID)
	}
	// A dry run changes nothing.
	if _, err := s.Create(ctx, &schema.Device{Metadata: schema.ObjectMeta{Name: "dry"}}, true); err != nil {
		t.Fatal(err)
	}
	check("dry", false)
	// Modifying keeps the uid; deleting and re-creating changes it.
	if _, err := s.Mutate(ctx, schema.KindDevice, "pi", func(o schema.Object) error {
		o.GetMetadata().Labels = map[string]string{"site": "b"}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	uid1 := check("pi", true)
	if _, err := s.Delete(ctx, schema.KindDevice, "pi", "", false); err != nil {
		t.Fatal(err)
	}
	check("pi", false)
	if _, err := s.Create(ctx, &schema.Device{Metadata: schema.ObjectMeta{Name: "pi"}}, false); err != nil {
		t.Fatal(err)
	}
	if uid2 := check("pi", true); uid2 == uid1 {
		t.Fatal("re-created device kept the old uid")
	}
	// A transaction sees the device it creates itself.
	if _, err := s.Write(ctx, func(tx *Txn) error {
		if _, _, err := tx.putObject(&schema.Device{Metadata: schema.ObjectMeta{Name: "new"}}, modeCreate); err != nil {
			return err
		}
		if _, ok := tx.DeviceUID("new"); !ok {
			t.Error("device created in the transaction not seen")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := check("pi", true)
	// Reopening loads the index from the store.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if got := check("pi", true); got != want {
		t.Fatalf("after reopen: %q, want %q", got, want)
	}
	check("new", true)
	check("dry", false)
}
