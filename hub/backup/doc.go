// Package backup writes, reads and restores a Fleet hub's backups: one
// file that holds the store at one revision and every file of the data
// directory devices depend on (the CA and its key, the signing keys, the
// Secrets key, the admin and MQTT credentials), encrypted with age to a
// passphrase or to X25519 recipients. It also runs the hub's scheduled
// backups (Scheduler).
//
// # File format (version 1)
//
// The file is an age file (filippo.io/age); inside it, a tar stream of:
//
//	store.snap       the store at one revision (store.Store.Snapshot)
//	files/{name}     a file of the data directory, as it was
//	manifest.json    Manifest: format, revision, time, hub identity, object
//	                 counts, and the size and SHA-256 of every part above
//
// age authenticates the whole stream (a flipped byte fails decryption);
// the manifest's digests are checked again on every read, so a part
// cut short or swapped is refused too. The manifest is last because the
// store is streamed: a reader reads the file through before it trusts it.
//
// # Restoring
//
// Restore creates a data directory from a backup, on an empty disk only:
// it refuses a directory that holds anything, and writes into a sibling
// temporary directory that is renamed into place once everything was
// written and checked, so a failed restore leaves nothing behind. The
// restored store keeps its ID, revision, CA and keys: devices accept it
// without a new token or pin. Generations never go backwards: every
// restored device's desired state is held (store.RestoreHoldKey) until
// the device reports the generation it runs; the hub then continues above
// it (hub/controller). Whatever was written after the backup is lost.
package backup
