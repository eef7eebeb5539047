// Package client is the Go client of the Fleet hub HTTP API (hub/API.md):
// apply, list, get, create, update, delete and watch of Deployments and
// Devices, device token issue, monitor credentials and the hub's info (the
// MQTT URL devices use). ModifyDevice is a read-modify-write that retries
// on Conflict; LabelEdit applies kubectl-style label changes. Errors from
// the hub are *APIError values that carry the hub's schema.Status; test them
// with IsNotFound, IsConflict, IsInvalid, IsUnauthorized and IsExpired.
//
// Config resolves where the hub is and which token to use, the way the
// fleet CLI does (flags, environment, config files).
//
// The package speaks HTTP only: it must not import the store, the broker or
// the container runtime.
package client
