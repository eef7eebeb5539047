package controller

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// TestRestoredHubContinuesAboveReportedGenerations restores a store from
// a snapshot and checks the restore hold: nothing is published to a
// restored device until it reports; then its state continues above the
// generation it reported, and the hold is gone from the store.
func TestRestoredHubContinuesAboveReportedGenerations(t *testing.T) {
	root := t.TempDir()
	st, err := store.Open(store.Options{Dir: filepath.Join(root, "store"), GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	pub := newRecorder()
	_, stop := runController(t, st, pub, nil)
	apply(t, st, dev("a"), dev("b"), depl("web", "nginx:1"))
	eventually(t, "both placed", func() bool {
		a, b := pub.desired(t, "a"), pub.desired(t, "b")
		return a != nil && b != nil && len(a.Pods) == 1 && len(b.Pods) == 1
	})
	before := pub.desired(t, "a")
	stop()
	var snap bytes.Buffer
	if _, err := st.Snapshot(t.Context(), &snap); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	dst := filepath.Join(t.TempDir(), "store")
	if _, err := store.RestoreSnapshot(t.Context(), store.RestoreOptions{Dir: dst}, &snap); err != nil {
		t.Fatal(err)
	}
	rs, err := store.Open(store.Options{Dir: dst, GCInterval: -1, SecretKeyFile: filepath.Join(root, store.SecretKeyFileName)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	status := &fakeStatus{st: map[string]*schema.DeviceStatus{}}
	pub2 := newRecorder()
	c, stop2 := runController(t, rs, pub2, status)
	p := c.Passes()
	apply(t, rs, depl("other", "busybox:1", "site", "nowhere")) // a pass
	eventually(t, "a pass", func() bool { return c.Passes() > p })
	if n := pub2.count("fleet/v1/devices/", "/desired"); n != 0 {
		t.Fatalf("the restored hub published %d desired states before any device reported", n)
	}

	// a ran generation before+5 (written after the backup) and reports it.
	ran := before.Generation + 5
	status.set("a", &schema.DeviceStatus{Device: "a", ObservedGeneration: ran, Store: before.Store})
	c.StatusChanged()
	eventually(t, "a's state above what it runs", func() bool {
		ds := pub2.desired(t, "a")
		return ds != nil && ds.Generation == ran+RestoreGenerationGap
	})
	if got := pub2.desired(t, "a"); len(got.Pods) != 1 || got.Pods[0].Hash != before.Pods[0].Hash || got.Store != before.Store {
		t.Errorf("a's restored state %+v, want the backup's pods %+v", got, before.Pods)
	}
	if ds := pub2.desired(t, "b"); ds != nil {
		t.Errorf("b, which never reported, was sent generation %d", ds.Generation)
	}
	err = rs.View(t.Context(), func(tx *store.Txn) error {
		if _, err := tx.Get(store.RestoreHoldKey("a")); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a's hold: %v, want it gone", err)
		}
		if _, err := tx.Get(store.RestoreHoldKey("b")); err != nil {
			t.Errorf("b's hold: %v, want it kept", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// b reports a generation below the backup's (it was offline since
	// before it): it continues above both.
	bGen := pub.desired(t, "b").Generation
	status.set("b", &schema.DeviceStatus{Device: "b", ObservedGeneration: bGen - 1, Store: before.Store})
	c.StatusChanged()
	eventually(t, "b released", func() bool {
		ds := pub2.desired(t, "b")
		return ds != nil && ds.Generation == bGen-1+RestoreGenerationGap
	})
	// Released, a device is ordinary again: an unchanged report changes
	// nothing, a change is one generation more.
	p = c.Passes()
	c.StatusChanged()
	apply(t, rs, dev("a", "touched", "1"))
	eventually(t, "a pass", func() bool { return c.Passes() > p })
	if ds := pub2.desired(t, "a"); ds.Generation != ran+RestoreGenerationGap {
		t.Errorf("a released device's generation moved to %d", ds.Generation)
	}
	stop2()
}
