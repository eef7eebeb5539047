package controller

import (
	"maps"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// TestChangeSet: a deployment changed twice between passes keeps the
// selector it had before the first change (the devices that may hold its
// pod), a new one has none, and clear forgets everything.
func TestChangeSet(t *testing.T) {
	ch := newChangeSet()
	if !ch.full {
		t.Fatal("a new change set does not ask for a full pass")
	}
	ch.clear()
	first := depl("web", "nginx:1", "site", "north")
	second := depl("web", "nginx:1", "site", "south")
	ch.deploymentChanged("web", first)
	ch.deploymentChanged("web", second)
	ch.deploymentChanged("api", nil)
	ch.deviceChanged("pi")
	ch.configChanged(schema.KindSecret, "token")
	ch.reported = map[string]bool{"pi": true}
	if sel := ch.oldSel["web"]; sel == nil || sel.MatchLabels["site"] != "north" {
		t.Errorf("web's old selector %+v, want site=north (before the first change)", sel)
	}
	if sel, ok := ch.oldSel["api"]; !ok || sel != nil {
		t.Errorf("api's old selector %+v (recorded %v), want none: it is new", sel, ok)
	}
	if !maps.Equal(ch.deployments, map[string]bool{"web": true, "api": true}) || !ch.devices["pi"] || !ch.config[configKey{schema.KindSecret, "token"}] {
		t.Errorf("change set %+v", ch)
	}
	ch.clear()
	if ch.full || len(ch.devices)+len(ch.deployments)+len(ch.oldSel)+len(ch.config)+len(ch.reported) != 0 {
		t.Errorf("after clear: %+v", ch)
	}
}

// TestStatusInbox: take hands over the devices that reported and whether
// all may have, once; what arrives later waits for the next take.
func TestStatusInbox(t *testing.T) {
	b := statusInbox{devs: map[string]bool{}, wake: make(chan struct{}, 1)}
	b.changed("a")
	b.changed("b")
	select {
	case <-b.wake:
	default:
		t.Fatal("a report did not wake the loop")
	}
	devs, all := b.take()
	if !maps.Equal(devs, map[string]bool{"a": true, "b": true}) || all {
		t.Fatalf("take: %v, all %v", devs, all)
	}
	b.changed("c")
	if !maps.Equal(devs, map[string]bool{"a": true, "b": true}) {
		t.Fatalf("a later report changed what was taken: %v", devs)
	}
	b.changedAll()
	if devs, all = b.take(); !maps.Equal(devs, map[string]bool{"c": true}) || !all {
		t.Fatalf("second take: %v, all %v", devs, all)
	}
	if devs, all = b.take(); devs != nil || all {
		t.Fatalf("third take: %v, all %v, want nothing", devs, all)
	}
}
