// Package store is the hub's durable state: a Badger database with sync
// writes (or, for several hubs, an etcd cluster: engine.go), a store-wide revision counter, Fleet objects (Devices,
// Deployments, ConfigMaps, Secrets) with Kubernetes-style metadata, hashed
// device and operator tokens, and an in-process change feed (Watch).
//
// The values of Secrets are encrypted at rest (secrets.go) with a key kept
// in a file of its own (Options.SecretKeyFile); everything the store hands
// out of a Secret — reads, write results, watch events — carries its keys
// and their sizes only, except Txn.GetSecretData and ListSecretData, for
// the controller.
//
// # Key layout (version 1)
//
//	v1/meta/revision           uint64, big-endian: bumped inside every write transaction
//	v1/meta/store-id           random UUID created on first open (DesiredState.Store)
//	v1/meta/secret-key-id      ID of the key in Options.SecretKeyFile that seals Secrets
//	v1/meta/commit-id          etcd only: random ID of the last commit (or a fence), so a
//	                           commit whose answer was lost (leader change) is found
//	                           applied, or fenced off for good
//	v1/objects/{resource}/{n}  object JSON; resource is "devices", "deployments",
//	                           "configmaps" or "secrets" (a Secret: its public form
//	                           with "keys", and "encrypted": its values sealed, see
//	                           secrets.go)
//	v1/revisions/{dep}/{n}     a Deployment's revision n (20 digits), a
//	                           schema.DeploymentRevision, written with the Deployment
//	                           (revisions.go); the Deployment's stored status.revision
//	                           is the newest
//	v1/desired/{device}        per-device DesiredState (written by the controller)
//	v1/desired-generation/{d}  last generation of a deleted device (decimal), so a
//	                           re-created device continues from it
//	v1/desired-signature/{d}   a cache of the signature last published with the
//	                           device's desired state (controller, sigcache.go),
//	                           written outside the revisions by WriteCache
//	v1/status/{device}         last DeviceStatus (written by the status ingest)
//	v1/tokens/{device}         device token record: SHA-256 of the token (and, with
//	                           Options.PasswordHash, e.g. its Mosquitto "$7$" hash)
//	v1/credentials/{name}      operator credential (admin, monitor…): hashes and role
//	v1/bootstrap-tokens/{id}   bootstrap token: hashes, labels, expiry, uses (bootstrap.go)
//	v1/enrollments/{request}   device created by an enrollment request (bootstrap.go)
//	v1/device-keys/{device}    public key (base64) the device sent when it enrolled
//	v1/crash-reports/{device}  the device's latest crash report per container, a JSON
//	                           array of schema.CrashReport (written by the status ingest)
//	v1/audit/{seq}             audit trail entry (20 digits), a schema.AuditEntry, each
//	                           carrying the hash of the one before; kept by age and
//	                           size (Options.AuditRetention, AuditMaxBytes); appends do
//	                           not bump the revision (audit.go)
//	v1/auditanchor             seq and hash of the last pruned audit entry (auditchain.go)
//	v1/agent-rollouts/{name}   an AgentRollout's planner state (hub/agentplan.State),
//	                           written by the controller
//	v1/fleet-ca                with etcd: hash of the CA every hub of the fleet presents
//	                           (hub/fleetca.go)
//	v1/fleet-signing-key       with etcd: ID of the key every hub of the fleet signs
//	                           desired states with (hub/fleetsigning.go)
//
// Every write goes through a Txn (Store.Write): the revision is bumped once
// per committed transaction that changed anything, and object events carry
// that revision. Writes are serialised inside the process, so the revision
// order is the commit order and the order in which watchers see events.
//
// # Engines
//
// The logic above sits on a small engine (engine.go): Badger in Options.Dir
// (engine_badger.go, sync writes), or an etcd cluster under a key prefix
// (engine_etcd.go, Options.Etcd), with the same keys. An etcd transaction
// reads at one etcd revision and commits as one etcd transaction that
// compares the mod revisions of what it read and that no other commit came
// after its snapshot; the store revision stays the counter above (strictly
// increasing, store-wide), not etcd's own. A commit acknowledged is
// committed to a quorum; one whose answer was lost is settled (applied, or
// fenced off and run again). On Badger, Watch and the token cache are fed
// by this process's writes (it is the only writer). On etcd, any number of
// hubs share a prefix: each follows every commit, its own and the
// others', through etcd's watch (follow.go), so every hub's watchers see
// every change in one order with the same revisions, and a token issued or
// revoked through one hub is honoured or refused by all; a write returns
// once its own commit is back in this hub's feed. hub/store/storetest
// checks every guarantee on both engines, and the shared ones on two
// stores over one etcd prefix.
package store
