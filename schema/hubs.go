package schema

import "time"

// HubMember is one hub of a fleet whose store is on etcd, as it registers
// itself (under a key bound to its lease, so it disappears when the hub
// does): an item of GET /v1/hubs.
type HubMember struct {
	// ID names the hub (--hub-id; default: the host name and a random
	// suffix kept in the data directory).
	ID string `json:"id"`
	// APIURL is where the hub serves the HTTP API.
	APIURL string `json:"apiURL,omitempty"`
	// BrokerURL is its embedded broker's URL for devices (or the external
	// broker it uses).
	BrokerURL string `json:"brokerURL,omitempty"`
	// Version is the hub's version.
	Version string `json:"version,omitempty"`
	// Started is when the hub registered.
	Started time.Time `json:"started"`
	// Leader is true for the hub that holds the leadership: it runs the
	// controller, the rollouts and the publishing of desired states, and
	// only its embedded broker accepts devices.
	Leader bool `json:"leader"`
	// Lease is the etcd lease (hex) the registration, and the leader's
	// election key, are bound to.
	Lease string `json:"lease"`
	// LeaseTTLSeconds is the lease's TTL (--leader-lease).
	LeaseTTLSeconds int64 `json:"leaseTTLSeconds"`
	// LeaseRemainingSeconds is how long the lease has left unless the hub
	// renews it (it renews every third of the TTL); -1 when etcd did not
	// say.
	LeaseRemainingSeconds int64 `json:"leaseRemainingSeconds"`
}

// HubMemberList is the body of GET /v1/hubs: every hub registered on the
// fleet's store, the leader first.
type HubMemberList struct {
	// Leader is the ID of the leader hub ("" while there is none, during
	// a failover).
	Leader string `json:"leader"`
	// Store is "etcd" or "badger" (one hub, always the leader).
	Store string      `json:"store"`
	Items []HubMember `json:"items"`
}
