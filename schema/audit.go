package schema

import "time"

// Roles of operator credentials besides RoleMonitor (see hub/API.md,
// "Roles"): an admin may do everything, a viewer may read everything an
// admin may but for password hashes and the audit trail, and do nothing
// else.
const (
	RoleAdmin  = "admin"
	RoleViewer = "viewer"
)

// Roles lists every operator role, most powerful first.
var Roles = []string{RoleAdmin, RoleViewer, RoleMonitor}

// Audit results other than an HTTP status code.
const (
	AuditOK = "ok"
)

// Audit actors that are no credential.
const (
	// AuditAnonymous is the actor of a request without a valid token.
	AuditAnonymous = "anonymous"
)

// DefaultAuditLimit is how many entries GET /v1/audit answers at most
// unless told otherwise.
const DefaultAuditLimit = 500

// AuditEntry is one line of the hub's audit trail (GET /v1/audit): who
// did what to which object, from where, and how it went. It never holds
// a token or a Secret's value.
type AuditEntry struct {
	// Seq numbers the entries of one hub store, strictly growing.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Actor is the credential's name, "device NAME", "bootstrap-token ID"
	// or AuditAnonymous.
	Actor string `json:"actor"`
	// Role is the credential's role, if Actor is a credential.
	Role string `json:"role,omitempty"`
	// Source is the client's address (host, no port).
	Source string `json:"source,omitempty"`
	// Action is the verb: apply, create, update, delete, issue-token,
	// rollback, exec, logs, use-token, authenticate, or the HTTP method
	// for other requests.
	Action string `json:"action"`
	// Object is what the action was on: "deployments/web",
	// "credentials/grafana", "devices/pi-1/pods/web".
	Object string `json:"object,omitempty"`
	// Result is AuditOK or the HTTP status code of a failure ("403").
	Result string `json:"result"`
	// Detail says more: the objects an apply changed, why a request was
	// refused, how an exec ended.
	Detail string `json:"detail,omitempty"`
}

// AuditList is the body of GET /v1/audit: entries oldest first.
type AuditList struct {
	TypeMeta `json:",inline"`
	Items    []AuditEntry `json:"items"`
}
