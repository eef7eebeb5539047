package dashboard

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/fleetmodel"
)

// fakeDeployments is a deploymentLister over a map.
type fakeDeployments struct {
	mu   sync.Mutex
	objs map[string]string
}

func (f *fakeDeployments) set(name, raw string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if raw == "" {
		delete(f.objs, name)
		return
	}
	f.objs[name] = raw
}

func (f *fakeDeployments) list(_ context.Context, fn func(string, []byte) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range slices.Sorted(func(yield func(string) bool) {
		for k := range f.objs {
			if !yield(k) {
				return
			}
		}
	}) {
		if err := fn(n, []byte(f.objs[n])); err != nil {
			return err
		}
	}
	return nil
}

// TestTrackerNamesWhatChanged drives scans by hand (the loop's interval
// is an hour) and checks what each one reports.
func TestTrackerNamesWhatChanged(t *testing.T) {
	now := t0
	m := fleet(t, &now, "pi-1 online site=a", "pi-2 online site=a", "pi-3 offline site=b")
	deps := &fakeDeployments{objs: map[string]string{"web": `{"rv":"1"}`}}
	tr := newTracker(m, deps.list, time.Hour, func() time.Time { return now }, slog.New(slog.DiscardHandler))
	ctx := t.Context()
	sub, err := tr.subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.stop()
	defer tr.unsubscribe(sub)
	if hello := sub.take(); hello.Counts.Devices != 3 || hello.Counts.Online != 2 {
		t.Errorf("hello counts %+v", hello.Counts)
	}

	w := m.Writer()
	uid := func(name string) string { u, _, _ := m.Device(name); return u }
	steps := []struct {
		what   string
		change func()
		want   string // Devices/Deployments/AllDevices, "" for no change at all
	}{
		{"nothing", func() {}, ""},
		{"a report", func() {
			m.UpdateReport("pi-1", uid("pi-1"), func(r *fleetmodel.Report, _ bool) bool { r.Online = false; return true })
		}, "devices [pi-1] deployments [] all false"},
		{"a label", func() {
			w.PutDevice("pi-2", fleetmodel.Device{UID: uid("pi-2"), Labels: map[string]string{"site": "c"}})
		}, "devices [pi-2] deployments [] all false"},
		{"a deletion and a deployment", func() {
			w.DeleteDevice("pi-3")
			deps.set("web", `{"rv":"2"}`)
		}, "devices [pi-3] deployments [web] all false"},
		{"time passing makes no change", func() { now = now.Add(time.Second) }, ""},
		{"a deployment deleted", func() { deps.set("web", "") }, "devices [] deployments [web] all false"},
		{"many devices", func() {
			for i := range MaxNamed + 1 {
				w.PutDevice(fmt.Sprint("new-", i), fleetmodel.Device{UID: fmt.Sprint("n", i)})
			}
		}, "devices [] deployments [] all true"},
	}
	for _, st := range steps {
		st.change()
		if err := tr.scan(ctx); err != nil {
			t.Fatal(err)
		}
		var got string
		select {
		case <-sub.wake:
			ch := sub.take()
			got = fmt.Sprintf("devices %v deployments %v all %v", ch.Devices, ch.Deployments, ch.AllDevices)
		default:
		}
		if got != st.want {
			t.Errorf("%s: got %q, want %q", st.what, got, st.want)
		}
	}
}

// TestSubscriberMerges: changes a slow stream has not sent yet are
// merged into one.
func TestSubscriberMerges(t *testing.T) {
	s := &subscriber{wake: make(chan struct{}, 1)}
	s.add(Change{Seq: 1, Devices: []string{"b"}, Counts: Counts{Devices: 1}})
	s.add(Change{Seq: 2, Devices: []string{"a", "b"}, Deployments: []string{"web"}, Counts: Counts{Devices: 2}})
	ch := s.take()
	if got := fmt.Sprint(ch.Seq, ch.Devices, ch.Deployments, ch.Counts.Devices, ch.AllDevices); got != "2 [a b] [web] 2 false" {
		t.Errorf("merged %s", got)
	}
	var many []string
	for i := range MaxNamed {
		many = append(many, fmt.Sprint("d", i))
	}
	s.add(Change{Seq: 3, Devices: many})
	s.add(Change{Seq: 4, Devices: []string{"one-more"}})
	if ch := s.take(); !ch.AllDevices || len(ch.Devices) != 0 {
		t.Errorf("over MaxNamed: all %v, %d names", ch.AllDevices, len(ch.Devices))
	}
	if ch := s.take(); ch.AllDevices || len(ch.Devices) != 0 || !strings.Contains(fmt.Sprint(ch.Seq), "4") {
		t.Errorf("an emptied mailbox: %+v", ch)
	}
}
