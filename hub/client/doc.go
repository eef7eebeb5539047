// Package client is the Go client of the Fleet hub HTTP API (hub/API.md):
// apply, list, get, create, update, delete and watch of Deployments and
// Devices, and device token issue. Errors from the hub are *APIError values
// that carry the hub's schema.Status; test them with IsNotFound, IsConflict,
// IsInvalid, IsUnauthorized and IsExpired.
//
// Config resolves where the hub is and which token to use, the way the
// fleet CLI does (flags, environment, config files).
//
// The package speaks HTTP only: it must not import the store, the broker or
// the container runtime.
package client
