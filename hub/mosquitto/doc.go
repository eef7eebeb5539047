// Package mosquitto renders, for an external Mosquitto 2 broker, the
// password file and the ACL file of the fleet's MQTT accounts, and keeps
// them in sync with the store.
//
// Files renders both from the store: the hub's own account first, then
// every device with a token, every monitor credential and every bootstrap
// token (as bootstrap.<id>), with the access rules of broker.Allowed. An
// account the files cannot carry (a token issued before the store kept
// Mosquitto hashes, a name two accounts share) is left out and named in a
// warning, never rendered half. FilesFromStore does the same for a stopped
// hub (`fleet-hub mosquitto-config`); it fails with ErrStoreBusy while a
// hub holds the store.
//
// FileSync is level-based: every sync renders both files from the whole
// store and compares them with what is on disk (passwd mode 0600, acl
// 0644, each replaced atomically), so a missed trigger costs only time
// until the next one or the periodic resync (DefaultResync). Triggers
// (Trigger, ObserveRequest, devices added or deleted) are debounced
// (DefaultDebounce, at most 2 s under a stream of them). When a file
// changed, Mosquitto gets SIGHUP (the process in its pid_file); a failed
// signal is retried at the next sync. The hub account's salted hash is
// kept from the file on disk while it matches the hub's password, so that
// an unchanged store is an unchanged file.
package mosquitto
