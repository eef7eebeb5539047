package store

import "errors"

// Sentinel errors, checked with errors.Is. The HTTP API maps them to status
// codes: ErrNotFound 404, ErrConflict and ErrAlreadyExists 409, ErrExpired
// 410; schema.ErrInvalid (bad objects) is 400.
var (
	// ErrNotFound: no such object or key.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the write carried a resourceVersion that is not the
	// object's current one.
	ErrConflict = errors.New("conflict")
	// ErrAlreadyExists: Create of an object that exists.
	ErrAlreadyExists = errors.New("already exists")
	// ErrExpired: a watch asked for changes after a revision the in-memory
	// event ring no longer holds; list again and watch from the list's
	// revision.
	ErrExpired = errors.New("resource version expired")
	// ErrWatcherTooSlow ends a watch whose reader fell too far behind.
	ErrWatcherTooSlow = errors.New("watcher fell too far behind")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("store closed")
	// ErrLocked: Open found the store held by another process.
	ErrLocked = errors.New("store locked")
	// ErrTooLarge: one transaction would exceed what Badger commits at once.
	ErrTooLarge = errors.New("transaction too large")
	// ErrForeignStore: the engine (an etcd prefix) holds another fleet's
	// store, or keys that are no Fleet store's.
	ErrForeignStore = errors.New("not this fleet's store")
	// ErrUnavailable: the engine (etcd) could not be reached in time.
	ErrUnavailable = errors.New("store unavailable")
)
