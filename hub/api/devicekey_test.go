package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// TestRekeyDevice: POST /v1/devices/{name}/rekey is for admins only
// (viewer and monitor 403, no token 401), marks the device rekeyed
// (naming its bound key), answers 404 for an unknown device and 400 for
// a bad name, and every attempt is in the audit trail as "rekey".
func TestRekeyDevice(t *testing.T) {
	h := newTestHub(t, Options{})
	if r := h.admin(t, "POST", "/v1/apply", deviceYAML("pi")); r.Code != http.StatusOK {
		t.Fatalf("apply: %d %s", r.Code, r.Body)
	}
	obj, err := h.Store.Get(t.Context(), schema.KindDevice, "pi")
	if err != nil {
		t.Fatal(err)
	}
	key := strings.Repeat("A", 43) + "="
	if v, _, err := h.Store.BindDeviceKey(t.Context(), "pi", obj.GetMetadata().UID, key); err != nil || v != store.KeyBoundFirst {
		t.Fatalf("bind: %v %v", v, err)
	}
	viewer, err := h.Store.CreateCredential(t.Context(), "ci", store.RoleViewer)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		who, token string
		code       int
	}{{"viewer", viewer, 403}, {"monitor", h.Monitor, 403}, {"anonymous", "", 401}} {
		if r := h.do(t, "POST", "/v1/devices/pi/rekey", tc.token, nil); r.Code != tc.code {
			t.Errorf("rekey as %s: %d %s, want %d", tc.who, r.Code, r.Body, tc.code)
		}
	}
	if rec, _ := h.Store.DeviceKey(t.Context(), "pi"); rec.Rekey {
		t.Fatal("a refused rekey marked the device")
	}
	r := h.admin(t, "POST", "/v1/devices/pi/rekey", "")
	var out DeviceRekey
	if r.Code != http.StatusOK || json.Unmarshal(r.Body, &out) != nil || out != (DeviceRekey{Name: "pi", KeyID: schema.DeviceKeyID(key), RekeyPending: true}) {
		t.Fatalf("rekey: %d %s", r.Code, r.Body)
	}
	if rec, _ := h.Store.DeviceKey(t.Context(), "pi"); !rec.Rekey || rec.PublicKey != key {
		t.Errorf("after rekey: %+v", rec)
	}
	if r := h.admin(t, "POST", "/v1/devices/nope/rekey", ""); r.Code != http.StatusNotFound || !strings.Contains(string(r.Body), "nope") {
		t.Errorf("unknown device: %d %s", r.Code, r.Body)
	}
	if r := h.admin(t, "POST", "/v1/devices/Bad_Name/rekey", ""); r.Code != http.StatusBadRequest {
		t.Errorf("bad name: %d %s", r.Code, r.Body)
	}
	if r := h.admin(t, "GET", "/v1/devices/pi/rekey", ""); r.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d %s", r.Code, r.Body)
	}
	entries, err := h.Store.Audit(t.Context(), store.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		if e.Action == "rekey" {
			got = append(got, e.Actor+" "+e.Object+" "+e.Result)
		}
	}
	want := "ci devices/pi 403, grafana devices/pi 403, anonymous devices/pi 401, admin devices/pi ok, admin devices/nope 404, admin devices/Bad_Name 400"
	if strings.Join(got, ", ") != want {
		t.Errorf("audit trail:\n%s\nwant\n%s", strings.Join(got, ", "), want)
	}
}
