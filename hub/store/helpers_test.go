package store

import (
	"context"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

func openTest(t *testing.T, opts Options) *Store {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func newDeployment(name, image string) *schema.Deployment {
	return &schema.Deployment{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeployment},
		Metadata: schema.ObjectMeta{Name: name},
		Spec: schema.DeploymentSpec{
			Selector: schema.LabelSelector{MatchLabels: map[string]string{"site": "a"}},
			Template: schema.PodTemplate{Spec: schema.PodSpec{
				Containers: []schema.Container{{Name: "app", Image: image}},
			}},
		},
	}
}

func newDevice(name string, labels map[string]string) *schema.Device {
	return &schema.Device{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDevice},
		Metadata: schema.ObjectMeta{Name: name, Labels: labels},
	}
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// recv waits for one event (or the channel closing) with a deadline.
func recv(t *testing.T, ch <-chan Event) (Event, bool) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		return ev, ok
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
		return Event{}, false
	}
}

func revision(t *testing.T, s *Store) uint64 {
	t.Helper()
	rev, err := s.Revision(t.Context())
	if err != nil {
		t.Fatalf("Revision: %v", err)
	}
	return rev
}
