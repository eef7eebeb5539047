package controller

import (
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// TestTemplatePodCarriesUpdateTerms: the pod a device gets carries the
// deployment's window and lock, outside its hash; fleet/updateNow naming
// the current template's hash skips the window for it alone.
func TestTemplatePodCarriesUpdateTerms(t *testing.T) {
	dep := &schema.Deployment{Metadata: schema.ObjectMeta{Name: "web"}}
	dep.Spec.Template.Spec.Containers = []schema.Container{{Name: "app", Image: "app:1"}}
	hash := schema.TemplateHash(dep.Spec.Template)
	plain := templatePod(dep, hash)
	dep.Spec.UpdateWindow = &schema.UpdateWindow{Schedule: "0 1 * * *", Duration: "4h"}
	dep.Spec.UpdateLock = &schema.UpdateLock{Deadline: "10m"}
	p := templatePod(dep, hash)
	if p.UpdateWindow != dep.Spec.UpdateWindow || p.UpdateLock != dep.Spec.UpdateLock || p.UpdateNow || p.Hash != plain.Hash {
		t.Fatalf("pod %+v: want the window and lock, same hash, not now", p)
	}
	dep.Metadata.Annotations = map[string]string{schema.AnnotationUpdateNow: "other"}
	if templatePod(dep, hash).UpdateNow {
		t.Error("updateNow for another revision's hash")
	}
	dep.Metadata.Annotations[schema.AnnotationUpdateNow] = hash
	if !templatePod(dep, hash).UpdateNow {
		t.Error("updateNow naming this revision not set")
	}
}

func TestCountUpdates(t *testing.T) {
	if countUpdates(nil) != nil {
		t.Fatal("no marks: want nil")
	}
	at := time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)
	c := countUpdates(map[string]updateMark{
		"a": {state: schema.UpdateDownloading},
		"b": {state: schema.UpdateWaiting, waiting: true, until: at.Add(time.Hour)},
		"c": {state: schema.UpdateWaiting, waiting: true, until: at},
		"d": {state: schema.UpdateDownloaded},
		"e": {state: schema.UpdateSwitched},
	})
	if c.Downloading != 1 || c.Downloaded != 3 || c.Waiting != 2 || c.Switched != 1 || c.WaitingUntil == nil || !c.WaitingUntil.Equal(at) {
		t.Fatalf("counts %+v", c)
	}
}
