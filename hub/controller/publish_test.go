package controller

import (
	"context"
	"log/slog"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// TestPublishUnpublished: an incremental pass publishes the desired states
// stored and not yet published (a failed publish stays to be published),
// and the clears of removed devices, and nothing else.
func TestPublishUnpublished(t *testing.T) {
	ctx := context.Background()
	rec := newRecorder()
	opts := Options{Conn: rec, PublishWorkers: 2, PublishTimeout: DefaultPublishTimeout, Logger: slog.New(slog.DiscardHandler)}
	out := newSender(opts)
	p := newDesiredTopics(out, opts)
	desired := map[string]*schema.DesiredState{}
	store := func(name string, gen int64) {
		desired[name] = &schema.DesiredState{Device: name, Generation: gen}
		p.stored(name, gen, []byte(`{"device":"`+name+`"}`))
	}
	lookup := func(name string) *schema.DesiredState { return desired[name] }
	topic := func(name string) string { return schema.Topics{}.Device(name, schema.TopicDesired) }
	sent := func() []string {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		var out []string
		for _, m := range rec.msgs {
			out = append(out, m.topic)
		}
		rec.msgs = nil
		return out
	}

	// Stored by a pass whose commit published it: nothing is left.
	store("a", 1)
	out.publish(ctx, []message{p.desiredMessage("a", 1)})
	sent()
	p.publishUnpublished(ctx, lookup)
	if got := sent(); len(got) != 0 {
		t.Fatalf("published %v, want nothing", got)
	}

	// A publish that fails is published by the next pass, once.
	store("b", 1)
	rec.fail = true
	out.publish(ctx, []message{p.desiredMessage("b", 1)})
	if !out.takeFailed() {
		t.Fatal("the failed publish was not recorded")
	}
	rec.fail = false
	p.publishUnpublished(ctx, lookup)
	if got := sent(); len(got) != 1 || got[0] != topic("b") {
		t.Fatalf("published %v, want %s", got, topic("b"))
	}
	p.publishUnpublished(ctx, lookup)
	if got := sent(); len(got) != 0 {
		t.Fatalf("published %v again", got)
	}

	// A newer generation stored while an older one was being published
	// stays to be published.
	store("c", 1)
	older := p.desiredMessage("c", 1)
	store("c", 2)
	out.publish(ctx, []message{older})
	sent()
	p.publishUnpublished(ctx, lookup)
	if got := sent(); len(got) != 1 || got[0] != topic("c") {
		t.Fatalf("published %v, want %s at generation 2", got, topic("c"))
	}

	// A removed device's topics are cleared; it is not published.
	store("d", 1)
	delete(desired, "d")
	p.removed("d")
	p.publishUnpublished(ctx, lookup)
	got := sent()
	if len(got) != 3 {
		t.Fatalf("published %v, want the three clears of d", got)
	}
	for _, tp := range got {
		if tp == topic("d") {
			continue
		}
		if d, _, err := (schema.Topics{}).ParseDevice(tp); err != nil || d != "d" {
			t.Fatalf("published %s, want only d's topics cleared", tp)
		}
	}
	if len(p.unpublished) != 0 || len(p.clears) != 0 {
		t.Fatalf("left unpublished %v and clears %v", p.unpublished, p.clears)
	}
}
