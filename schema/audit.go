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
	// Count is set on aggregated entries (refusals, failed logins, token
	// uses): how many events of one actor, source, action and result this
	// entry stands for, from Time to Until. Absent: one event.
	Count int `json:"count,omitempty"`
	// Until is the time of the last event an aggregated entry counts.
	Until time.Time `json:"until,omitzero"`
	// Prev is the Hash of the entry before (or of the last one pruned;
	// "" for the first ever).
	Prev string `json:"prev"`
	// Hash is the hex SHA-256 of Prev followed by the entry's canonical
	// JSON (itself with Hash ""): the trail is a hash chain, which
	// POST /v1/audit/verify checks.
	Hash string `json:"hash"`
}

// AuditVerification is the answer of POST /v1/audit/verify: whether the
// chain holds from the anchor (the last pruned entry) to the newest entry.
type AuditVerification struct {
	TypeMeta `json:",inline"`
	// OK: every entry is in place and unedited.
	OK bool `json:"ok"`
	// Entries is how many entries were checked; FirstSeq and LastSeq the
	// range, Head the Hash of the newest (compare it with one kept
	// elsewhere to detect a rewritten tail).
	Entries  int    `json:"entries"`
	FirstSeq uint64 `json:"firstSeq,omitempty"`
	LastSeq  uint64 `json:"lastSeq,omitempty"`
	Head     string `json:"head,omitempty"`
	// Anchor is the last pruned entry, whose hash the oldest kept one
	// carries as Prev (seq 0: nothing pruned yet).
	Anchor AuditAnchor `json:"anchor"`
	// Unchained counts entries older than the chain (written by a hub
	// before it had one): listed, not checked.
	Unchained int `json:"unchained,omitempty"`
	// Broken names the first entry that breaks the chain; nil if OK.
	Broken *AuditBreak `json:"broken,omitempty"`
}

// AuditAnchor is the seq and hash of the last pruned audit entry.
type AuditAnchor struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
}

// AuditBreak is where an audit chain breaks.
type AuditBreak struct {
	// Seq is the entry that is missing, edited or out of place.
	Seq    uint64 `json:"seq"`
	Reason string `json:"reason"`
}

// AuditList is the body of GET /v1/audit: entries oldest first.
type AuditList struct {
	TypeMeta `json:",inline"`
	Items    []AuditEntry `json:"items"`
}
