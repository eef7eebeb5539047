package api

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// Who may do what (hub/API.md, "Roles"):
//
//   - admin: everything.
//   - viewer (a read-only admin): every GET but adminOnlyReads; no write,
//     no exec, no logs.
//   - monitor: GET on monitorReads only: status, online, events (which
//     never hold a log: the hub strips an old agent's logTail, and crash
//     reports are adminOnlyReads), metrics, top and the dashboard; Devices, and Deployments without their pod
//     template (monitorView). Never ConfigMaps, Secrets, revisions,
//     credentials, bootstrap tokens, mosquitto files or the audit trail.
//
// A route is named by its ServeMux pattern, as registered with Handle; a
// route missing from both lists is readable by viewers and admins only,
// so a new route is closed to monitors until it is listed here.

// monitorReads are the routes a monitor may GET.
var monitorReads = map[string]bool{
	"/":                             true, // the API's 404 answer
	"/v1/{kind}":                    true, // devices, deployments (mayRead)
	"/v1/{kind}/{name}":             true, // likewise
	"/v1/devices/{name}/events":     true,
	"/v1/events":                    true,
	"/v1/info":                      true,
	"/v1/openapi.yaml":              true, // the API's description: no data
	"/v1/openapi.json":              true,
	"/metrics":                      true,
	"/v1/top":                       true,
	"/v1/devices/{device}/top":      true,
	"/v1/dashboard/session":         true,
	"/v1/dashboard/summary":         true,
	"/v1/dashboard/devices":         true,
	"/v1/dashboard/stream":          true,
	"/v1/deployments/{name}/status": true,

	// The dashboard's charts (hub/history).
	"/v1/dashboard/history/online":             true,
	"/v1/dashboard/history/devices/{name}":     true,
	"/v1/dashboard/history/deployments/{name}": true,
}

// adminOnlyReads are the routes only an admin may GET: password hashes,
// the audit trail, and what devices say about their pods' insides.
var adminOnlyReads = map[string]bool{
	"/v1/mosquitto/passwd":                 true,
	"/v1/audit":                            true,
	"/v1/devices/{device}/pods/{pod}/log":  true,
	"/v1/devices/{device}/crashreports":    true,
	"/v1/devices/{device}/pods/{pod}/exec": true,
	"/v1/backup":                           true, // POST only; listed so no read ever opens it
}

// monitorKinds are the kinds a monitor may read through /v1/{kind}.
var monitorKinds = map[string]bool{schema.KindDevice: true, schema.KindDeployment: true}

// isRead reports whether the request only reads.
func isRead(r *http.Request) bool {
	return r.Method == http.MethodGet || r.Method == http.MethodHead
}

// authorize says why cred may not make the request, or "" if it may.
func authorize(cred store.Credential, r *http.Request) string {
	switch {
	case cred.Role == store.RoleAdmin:
		return ""
	case !isRead(r):
		return fmt.Sprintf("credential %q (role %s) may only read", cred.Name, cred.Role)
	case adminOnlyReads[r.Pattern]:
		return fmt.Sprintf("credential %q (role %s) may not read %s: admin only", cred.Name, cred.Role, r.URL.Path)
	case cred.Role == store.RoleViewer:
		return ""
	case cred.Role == store.RoleMonitor && monitorReads[r.Pattern]:
		return ""
	}
	return fmt.Sprintf("credential %q (role %s) may not read %s: the monitor role reads status, events and metrics only", cred.Name, cred.Role, r.URL.Path)
}

// mayRead refuses a kind the request's credential may not read through
// /v1/{kind}: a monitor reads Devices and Deployments (without their pod
// template) only; a viewer and an admin read every kind (a Secret's keys
// and sizes: its values never leave the hub but to its devices).
func mayRead(r *http.Request, kind string) error {
	cred, _ := CredentialFrom(r.Context())
	if cred.Role == store.RoleAdmin || cred.Role == store.RoleViewer || (cred.Role == store.RoleMonitor && monitorKinds[kind]) {
		return nil
	}
	res, _ := store.ResourceForKind(kind)
	return fmt.Errorf("%w: credential %q (role %s) may not read %s", errForbidden, cred.Name, cred.Role, res)
}

// monitorView reports whether objects of kind are shown to the request's
// credential as monitorView shows them.
func monitorView(r *http.Request, kind string) bool {
	cred, _ := CredentialFrom(r.Context())
	return cred.Role == store.RoleMonitor && kind == schema.KindDeployment
}

// redactDeployment returns the JSON of a Deployment as a monitor sees it:
// metadata without annotations, spec with its selector, strategy and
// paused flag only (no pod template: no images, commands or env values),
// and the status. raw that does not decode comes out as {}: nothing
// unchecked reaches a monitor.
func redactDeployment(raw []byte) []byte {
	var obj struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   schema.ObjectMeta `json:"metadata"`
		Spec       struct {
			Selector json.RawMessage `json:"selector,omitempty"`
			Strategy json.RawMessage `json:"strategy,omitempty"`
			Paused   bool            `json:"paused,omitempty"`
		} `json:"spec"`
		Status json.RawMessage `json:"status,omitempty"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return []byte("{}")
	}
	obj.Metadata.Annotations = nil
	out, err := json.Marshal(obj)
	if err != nil {
		return []byte("{}")
	}
	return out
}
