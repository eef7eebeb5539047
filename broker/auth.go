package broker

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"sync"
)

// Role is what an authenticated MQTT client may do; see Allowed.
type Role int

// Roles. The zero value is no role at all and is allowed nothing.
const (
	// RoleDevice may read its own desired state and write its own status,
	// online, events and crashreports topics (Allowed has the whole list).
	RoleDevice Role = iota + 1
	// RoleMonitor may read every device's status, online and events topics
	// and every deployment's status (never crash reports); it writes
	// nothing.
	RoleMonitor
	// RoleHub may read and write every topic.
	RoleHub
	// RoleBootstrap holds a bootstrap token: it may only send its
	// enrollment request and read the answer (see Allowed).
	RoleBootstrap
)

func (r Role) String() string {
	switch r {
	case RoleDevice:
		return "device"
	case RoleMonitor:
		return "monitor"
	case RoleHub:
		return "hub"
	case RoleBootstrap:
		return "bootstrap"
	default:
		return fmt.Sprintf("Role(%d)", int(r))
	}
}

// Identity is who an MQTT client is, as decided by an Authenticator. For a
// device, Name is the device name (which is also its MQTT username); the
// client ID plays no part in access decisions.
type Identity struct {
	Name string
	Role Role
	// Request is the enrollment request ID of a RoleBootstrap client: the
	// broker sets it to the client's MQTT client ID on connect (an
	// Authenticator leaves it empty). It names the only enrollment topics
	// the client may use.
	Request string
	// RenewalOnly marks a RoleDevice session whose client certificate
	// expired (and otherwise verified): the broker sets it on connect,
	// and the session may only publish the device's csr topic and read
	// its certificate topic (Allowed). An Authenticator leaves it false.
	RenewalOnly bool
}

// Authenticator checks MQTT credentials. The hub implements it over its store
// (hashed tokens); StaticAuth is an in-memory implementation for tests.
//
// Authenticate must be safe for concurrent use and should return quickly: the
// broker calls it on the connecting client's goroutine, under a deadline.
type Authenticator interface {
	Authenticate(ctx context.Context, username string, password []byte) (Identity, bool)
}

// StaticAuth is an in-memory Authenticator for tests and fixed setups. It
// keeps SHA-256 hashes of the passwords (fine for the high-entropy tokens the
// hub issues, not for human passwords) and compares them in constant time.
// It is not a credential store: nothing is persisted.
type StaticAuth struct {
	mu    sync.RWMutex
	users map[string]staticUser
}

type staticUser struct {
	id   Identity
	hash [sha256.Size]byte
}

var _ Authenticator = (*StaticAuth)(nil)

// NewStaticAuth returns an empty StaticAuth.
func NewStaticAuth() *StaticAuth {
	return &StaticAuth{users: map[string]staticUser{}}
}

// Set adds or replaces the account whose username is id.Name.
func (a *StaticAuth) Set(id Identity, password string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.users == nil {
		a.users = map[string]staticUser{}
	}
	a.users[id.Name] = staticUser{id: id, hash: sha256.Sum256([]byte(password))}
}

// Remove deletes the account of username; its token stops working for new
// connections at once (call Broker.Kick to end existing ones).
func (a *StaticAuth) Remove(username string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.users, username)
}

// Authenticate implements Authenticator.
func (a *StaticAuth) Authenticate(_ context.Context, username string, password []byte) (Identity, bool) {
	sum := sha256.Sum256(password)
	a.mu.RLock()
	u, ok := a.users[username]
	a.mu.RUnlock()
	// Compare even for unknown users so timing does not reveal which exist.
	match := subtle.ConstantTimeCompare(sum[:], u.hash[:]) == 1
	if !ok || !match || username == "" {
		return Identity{}, false
	}
	return u.id, true
}
