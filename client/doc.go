// Package client is the Go library for the Fleet hub's HTTP API
// (hub/API.md): what the fleet CLI is built on, and what any Go program
// that manages a fleet imports. It lives apart from hub/, the server, and
// shares only the API types of schema with it.
//
// Client does apply, list, get, create, update, delete and watch of
// Deployments, Devices, ConfigMaps and Secrets (which the hub answers with
// their keys and sizes, never their values), device token issue, monitor
// credentials and the hub's info (the MQTT URL devices use). ModifyDevice
// is a read-modify-write that retries on Conflict; LabelEdit applies
// kubectl-style label changes; Follow lists then watches, resuming after a
// dropped stream; a Tracker follows a set of objects level-based (their
// latest state from lists, watch events and re-reads of status, which is
// no watch event), as fleet wait does. Errors from the hub are *APIError values that carry the
// hub's schema.Status; test them with IsNotFound, IsConflict, IsInvalid,
// IsUnauthorized, IsForbidden and IsExpired.
//
// ResolveConfig finds the hub and the token the way the fleet CLI does
// (flags, environment, config files). ConfigFile is the CLI's config file
// with kubeconfig-style contexts; AdminConfig is the flat form of the same
// file that fleet-hub writes to <data-dir>/admin.conf. The hub, which
// must not import this package, writes and reads it with hub/adminconf;
// cmd/fleet-hub's tests check that AdminConfig.Marshal and
// ReadAdminConfig (the parser the CLI reads every config file with) agree
// with it byte for byte.
//
// The sub-packages serve the CLI: printers formats objects (tables,
// describe, json, yaml, templates), manifest reads the -f files of apply,
// delete and diff, linediff prints the unified diffs of `fleet diff`, and
// fakehubtest is an in-memory hub for tests, imported by tests only.
//
// The package speaks HTTP only: it must not import the store, the broker, an
// MQTT client or the container runtime (cmd/fleet's dependency test checks).
package client
