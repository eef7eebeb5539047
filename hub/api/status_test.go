package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// fakeStatus is a StatusSource with fixed answers.
type fakeStatus struct{}

func (fakeStatus) DeviceStatusJSON(name string) []byte {
	if name == "silent" {
		return nil
	}
	b, _ := json.Marshal(schema.DeviceObservedInfo{Online: true, DesiredGeneration: 3, ObservedGeneration: 3, Converged: true})
	return b
}

func (fakeStatus) DeploymentStatusJSON(string) []byte {
	b, _ := json.Marshal(schema.DeploymentStatus{ObservedGeneration: 1, Targeted: 2, Ready: 2, Updated: 2})
	return b
}

func TestStatusMergedIntoAnswers(t *testing.T) {
	var mu sync.Mutex
	var observed []string
	h := newTestHub(t, Options{Status: fakeStatus{}, ObserveRequest: func(route string, code int, _ time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		observed = append(observed, route)
	}})
	if r := h.admin(t, "POST", "/v1/apply", deviceYAML("pi")+"---\n"+deviceYAML("silent")+"---\n"+deploymentYAML("web", "nginx")); r.Code != 200 {
		t.Fatalf("apply: %d %s", r.Code, r.Body)
	}
	var dev schema.Device
	r := h.admin(t, "GET", "/v1/devices/pi", "")
	if err := json.Unmarshal(r.Body, &dev); err != nil || dev.Status == nil || !dev.Status.Converged || dev.Status.DesiredGeneration != 3 {
		t.Errorf("GET device: %v %s", err, r.Body)
	}
	if !bytes.HasSuffix(r.Body, []byte("}\n")) {
		t.Errorf("GET body does not end with a newline: %q", r.Body[len(r.Body)-5:])
	}
	var devs schema.DeviceList
	r = h.admin(t, "GET", "/v1/devices", "")
	if err := json.Unmarshal(r.Body, &devs); err != nil || len(devs.Items) != 2 || devs.Items[0].Status == nil || devs.Items[1].Status != nil {
		t.Errorf("list: %v %s", err, r.Body)
	}
	var deps schema.DeploymentList
	r = h.admin(t, "GET", "/v1/deployments", "")
	if err := json.Unmarshal(r.Body, &deps); err != nil || len(deps.Items) != 1 || deps.Items[0].Status == nil || deps.Items[0].Status.Ready != 2 {
		t.Errorf("deployment list: %v %s", err, r.Body)
	}

	ws := h.watch(t, "/v1/devices?watch=true")
	for range 2 {
		ev, ok := ws.next(t, false)
		if !ok || ev.Type != schema.WatchAdded {
			t.Fatalf("event %+v", ev)
		}
		var d schema.Device
		if err := json.Unmarshal(ev.Object, &d); err != nil || (d.Metadata.Name == "pi") != (d.Status != nil) {
			t.Errorf("watch ADDED %s: %v", ev.Object, err)
		}
	}
	if r := h.admin(t, "DELETE", "/v1/devices/pi", ""); r.Code != http.StatusOK {
		t.Fatal(r.Code)
	}
	ev, _ := ws.next(t, false)
	var d schema.Device
	if err := json.Unmarshal(ev.Object, &d); err != nil || ev.Type != schema.WatchDeleted || d.Status != nil {
		t.Errorf("DELETED carries a status: %s", ev.Object)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(observed) == 0 || observed[0] != "/v1/apply" {
		t.Errorf("observed routes %v", observed)
	}
}

func TestWriteWithStatus(t *testing.T) {
	for _, tt := range []struct{ raw, status, want string }{
		{`{"a":1}`, `{"x":2}`, `{"a":1,"status":{"x":2}}`},
		{`{"a":1} `, `{"x":2}`, `{"a":1,"status":{"x":2}} `},
		{`{}`, `{"x":2}`, `{"status":{"x":2}}`},
		{`{"a":1}`, ``, `{"a":1}`},
		{`[1]`, `{"x":2}`, `[1]`},
	} {
		var b bytes.Buffer
		writeWithStatus(&b, []byte(tt.raw), []byte(tt.status))
		if b.String() != tt.want {
			t.Errorf("writeWithStatus(%s, %s) = %s, want %s", tt.raw, tt.status, b.String(), tt.want)
		}
	}
}
