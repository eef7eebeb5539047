package schema

import (
	"encoding/json"
	"slices"
)

// Wire types of the hub HTTP API (see API.md beside this file).

// Status is the body of every API error response.
type Status struct {
	TypeMeta `json:",inline"`
	// Code is the HTTP status code.
	Code int `json:"code"`
	// Reason is a machine-readable word: BadRequest, Invalid, Unauthorized,
	// Forbidden, NotFound, Conflict, AlreadyExists, RequestEntityTooLarge,
	// MethodNotAllowed, InternalError.
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Details lists every invalid field of an Invalid request.
	Details []FieldError `json:"details,omitempty"`
}

// ListMeta carries the store revision a list was read at; a watch resumed
// from it misses nothing.
type ListMeta struct {
	ResourceVersion string `json:"resourceVersion"`
	// Continue, set on a page of a list asked for with limit, is the
	// opaque token that asks for the next page (query continue=TOKEN);
	// empty on the last page.
	Continue string `json:"continue,omitempty"`
}

// DeviceList is the body of GET /v1/devices.
type DeviceList struct {
	TypeMeta `json:",inline"`
	Metadata ListMeta `json:"metadata"`
	Items    []Device `json:"items"`
}

// EventList is the body of GET /v1/devices/{name}/events (the device's
// recent events as the hub heard them) and of GET /v1/events (those of
// every selected device), oldest first.
type EventList struct {
	TypeMeta `json:",inline"`
	Items    []Event `json:"items"`
}

// DefaultEventsLimit is how many events GET /v1/events answers at most
// unless its limit parameter says otherwise.
const DefaultEventsLimit = 500

// NewestEvents orders evs by time (events of the same instant keep their
// order) and returns the newest limit of them, oldest first; limit 0 keeps
// them all. It reorders evs in place.
func NewestEvents(evs []Event, limit int) []Event {
	slices.SortStableFunc(evs, func(a, b Event) int { return a.Time.Compare(b.Time) })
	if limit > 0 && len(evs) > limit {
		evs = evs[len(evs)-limit:]
	}
	return evs
}

// DeploymentList is the body of GET /v1/deployments.
type DeploymentList struct {
	TypeMeta `json:",inline"`
	Metadata ListMeta     `json:"metadata"`
	Items    []Deployment `json:"items"`
}

// Watch event types.
const (
	WatchAdded    = "ADDED"
	WatchModified = "MODIFIED"
	WatchDeleted  = "DELETED"
	// WatchError carries a Status, after which the server ends the stream
	// (for example when the requested resourceVersion is too old).
	WatchError = "ERROR"
	// WatchBookmark carries only metadata.resourceVersion, to keep idle
	// streams alive and resumable.
	WatchBookmark = "BOOKMARK"
)

// WatchEvent is one line of a watch stream (newline-delimited JSON).
type WatchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// Apply actions, as kubectl prints them.
const (
	ActionCreated    = "created"
	ActionConfigured = "configured"
	ActionUnchanged  = "unchanged"
)

// ApplyResult reports what an apply did to one object.
type ApplyResult struct {
	Kind   string          `json:"kind"`
	Name   string          `json:"name"`
	Action string          `json:"action"`
	Object json.RawMessage `json:"object,omitempty"`
}

// ApplyResponse is the body of POST /v1/apply.
type ApplyResponse struct {
	DryRun  bool          `json:"dryRun,omitempty"`
	Results []ApplyResult `json:"results"`
	// Warnings are lines for people about objects that were applied but
	// may not do what their author expects (a Secret taken into a
	// container's environment lands on the device's disk); fleet apply
	// prints each as "Warning: ...".
	Warnings []string `json:"warnings,omitempty"`
}

// DeviceCredentials is returned once when a device is added or its token is
// rotated. The hub keeps only a hash of Token.
type DeviceCredentials struct {
	Name  string `json:"name"`
	Token string `json:"token"`
}

// MaxDeviceBatch is how many devices one POST /v1/devices:batch may
// register.
const MaxDeviceBatch = 10000

// DeviceBatch is the body of POST /v1/devices:batch: devices to register
// in one call, each of which gets a new token.
type DeviceBatch struct {
	// Items are the devices, at most MaxDeviceBatch, each name once.
	Items []DeviceBatchItem `json:"items"`
}

// DeviceBatchItem is one device of a DeviceBatch.
type DeviceBatchItem struct {
	// Name is the device's name. Required.
	Name string `json:"name"`
	// Labels are the labels a new device gets; a device that exists keeps
	// its own.
	Labels map[string]string `json:"labels,omitempty"`
	// Description is the spec.description a new device gets.
	Description string `json:"description,omitempty"`
}

// DeviceBatchResult is the answer of POST /v1/devices:batch, in the order
// of the request's items.
type DeviceBatchResult struct {
	Items []DeviceBatchItemResult `json:"items"`
}

// DeviceBatchItemResult is what became of one device of a batch.
type DeviceBatchItemResult struct {
	Name string `json:"name"`
	// Action is ActionCreated for a new device, ActionUnchanged for one
	// that existed (kept as it was, but for its new token).
	Action string `json:"action"`
	// Token is the device's new MQTT token, shown once; the hub keeps
	// only a hash.
	Token string `json:"token"`
}

// HubInfo is the body of GET /v1/info.
type HubInfo struct {
	Version string `json:"version"`
	Store   string `json:"store"`
	// MQTTURL is the broker URL devices connect to (tcp:// or ssl://).
	MQTTURL string `json:"mqttURL,omitempty"`
	// Brokers are every broker URL devices may use, the preferred first,
	// when the hub knows of more than MQTTURL (several hubs, each with its
	// own broker, only the leader's accepting devices): `fleet device add`
	// and `fleet token create` put them all in the join string and the
	// agent's --broker. Absent: MQTTURL alone.
	Brokers []string `json:"brokers,omitempty"`
	// ExternalBroker is true when the hub runs against an external broker.
	ExternalBroker bool `json:"externalBroker,omitempty"`
	// SigningKey is the public key the hub signs desired states with
	// (ed25519, base64 std; schema/signature.go).
	SigningKey string `json:"signingKey,omitempty"`
	// SigningKeyID is SigningKeyID of SigningKey.
	SigningKeyID string `json:"signingKeyId,omitempty"`
	// MQTTPlainURL is the embedded broker's plain listener (tcp://, on
	// loopback unless the hub runs with --insecure-plaintext), for local
	// agents and scripts; absent when it is off.
	MQTTPlainURL string `json:"mqttPlainURL,omitempty"`
	// HTTPSURL is the hub's HTTPS API, for clients on other machines.
	HTTPSURL string `json:"httpsURL,omitempty"`
	// CAHash pins the hub's own CA (CAHash): printed beside bootstrap
	// tokens and carried by join strings (the token itself does not).
	// Absent when the hub presents a certificate it was given.
	CAHash string `json:"caHash,omitempty"`
}

// Credential roles.
const (
	RoleMonitor = "monitor"
)

// Credential is a non-device MQTT credential (a read-only monitor).
// Token is set only in the answer that creates it.
type Credential struct {
	Name  string `json:"name"`
	Role  string `json:"role"`
	Token string `json:"token,omitempty"`
}

// CredentialList is the body of GET /v1/credentials.
type CredentialList struct {
	Items []Credential `json:"items"`
}
