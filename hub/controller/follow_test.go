package controller

import (
	"context"
	"testing"

	"github.com/fleetmq/fleet/hub/fleetmodel"
)

// TestFollowKeepsTheModelAndPublishesNothing: a standby's controller
// (LoadStandby, then Follow) keeps the model's devices and the stored desired states
// current with the store, but places, writes and publishes nothing; Run
// on the same controller afterwards loads everything and publishes as a
// leader does.
func TestFollowKeepsTheModelAndPublishesNothing(t *testing.T) {
	st := openStore(t, t.TempDir())
	first := newRecorder()
	_, stop := runController(t, st, first, nil)
	apply(t, st, dev("a"), depl("web", "nginx:1"))
	eventually(t, "the leader places web on a", func() bool {
		ds := first.desired(t, "a")
		return ds != nil && len(ds.Pods) == 1
	})
	stop()
	leaderGen := func() int64 {
		var gen int64
		c, err := New(Options{Store: st, Conn: newRecorder()})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Load(t.Context()); err != nil {
			t.Fatal(err)
		}
		if ds := c.fleet.model.Desired("a"); ds != nil {
			gen = ds.Generation
		}
		return gen
	}
	want := leaderGen()
	if want == 0 {
		t.Fatal("the leader's controller stored no desired state for a")
	}

	model := fleetmodel.New(fleetmodel.Options{})
	pub := newRecorder()
	c, err := New(Options{Store: st, Conn: pub, Model: model.Writer()})
	if err != nil {
		t.Fatal(err)
	}
	// Loaded before the hub releases the messages that arrived meanwhile.
	if err := c.LoadStandby(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := model.Device("a"); !ok {
		t.Fatal("LoadStandby: the model does not know device a")
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Follow(ctx) }()
	eventually(t, "the follower knows device a and its stored desired state", func() bool {
		_, _, ok := model.Device("a")
		ds := model.Desired("a")
		return ok && ds != nil && ds.Generation == want
	})
	apply(t, st, dev("b"))
	eventually(t, "the follower knows device b, created after it loaded", func() bool {
		_, _, ok := model.Device("b")
		return ok
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Follow: %v", err)
	}
	if n := pub.count("", ""); n != 0 {
		t.Fatalf("the follower published %d messages, want none", n)
	}
	if ds := model.Desired("b"); ds != nil {
		t.Fatalf("the follower placed device b: %+v", ds)
	}

	// Leading now: Run loads everything and places b.
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	go func() { done <- c.Run(ctx) }()
	eventually(t, "the leader's pass publishes b's desired state", func() bool { return pub.desired(t, "b") != nil })
	if ds := pub.desired(t, "a"); ds == nil || ds.Generation != want {
		t.Fatalf("a's desired state after Run: %+v, want generation %d", ds, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
