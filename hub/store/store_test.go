package store

import (
	"errors"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func TestReopenKeepsStateAndID(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	id := s.ID()
	if len(id) != 36 {
		t.Errorf("store id %q is not a uuid", id)
	}
	obj, _, err := s.Apply(t.Context(), newDeployment("web", "nginx:1"), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Errorf("second open of the same directory: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(t.Context(), schema.KindDeployment, "web"); !errors.Is(err, ErrClosed) {
		t.Errorf("get after close: %v", err)
	}
	s = openTest(t, Options{Dir: dir})
	if s.ID() != id {
		t.Errorf("store id changed %s -> %s", id, s.ID())
	}
	got, err := s.Get(t.Context(), schema.KindDeployment, "web")
	if err != nil {
		t.Fatal(err)
	}
	if got.GetMetadata().ResourceVersion != obj.GetMetadata().ResourceVersion {
		t.Errorf("rv %s after reopen, want %s", got.GetMetadata().ResourceVersion, obj.GetMetadata().ResourceVersion)
	}
	if _, _, err := s.Apply(t.Context(), newDeployment("web2", "nginx:1"), false); err != nil {
		t.Fatal(err)
	}
	if r := revision(t, s); r != 2 {
		t.Errorf("revision %d after reopen and one write, want 2", r)
	}
}

func TestRawKeys(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)
	rev, err := s.Write(ctx, func(t *Txn) error {
		if _, err := t.Get(DesiredKey("pi")); !errors.Is(err, ErrNotFound) {
			return err
		}
		return t.Set(DesiredKey("pi"), []byte(`{"generation":1}`))
	})
	if err != nil || rev != 1 {
		t.Fatalf("write: rev %d, %v", rev, err)
	}
	rev, err = s.Write(ctx, func(t *Txn) error {
		_, err := t.Get(DesiredKey("pi"))
		return err
	})
	if err != nil || rev != 0 || revision(t, s) != 1 {
		t.Errorf("read-only Write: rev %d, %v", rev, err)
	}
	refused := []string{keyRevision, "v1/meta/x", "v2/x", ObjectKey(schema.KindDevice, "pi"), "x"}
	for _, k := range refused {
		_, err := s.Write(ctx, func(t *Txn) error { return t.Set(k, []byte("x")) })
		if err == nil {
			t.Errorf("Set(%q) allowed", k)
		}
	}
	boom := errors.New("boom")
	_, err = s.Write(ctx, func(t *Txn) error {
		if err := t.Set(StatusKey("pi"), []byte("x")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) || revision(t, s) != 1 {
		t.Errorf("aborted write: %v, revision %d", err, revision(t, s))
	}
	var keys []string
	err = s.View(ctx, func(t *Txn) error {
		if err := t.Set(StatusKey("pi"), nil); err == nil {
			return errors.New("write in a read-only transaction allowed")
		}
		return t.Scan("v1/", func(k string, _ []byte) error { keys = append(keys, k); return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(keys, " ") != "v1/desired/pi v1/meta/revision v1/meta/secret-key-id v1/meta/store-id" {
		t.Errorf("keys %v", keys)
	}
}
