// Package hub assembles the Fleet control plane: it opens the store,
// makes sure an admin credential exists (writing <data-dir>/admin.conf),
// runs the embedded MQTT broker (or connects to an external one), the
// controller and the status ingest, and serves the HTTP API (hub/api) with
// the hub's own routes (/v1/info, device events, Mosquitto files,
// /metrics) until its context ends.
//
// Each part owns one thing, and data flows one way through them:
//
//	fleet apply ─▶ hub/api ─▶ hub/store (Badger, the authority)
//	hub/store ─▶ hub/controller ─▶ hub/fleetmodel (devices, desired states, deployment statuses)
//	                    └─▶ publisher ─▶ retained fleet/v1/devices/{device}/desired
//	fleet/v1/devices/{device}/status ─▶ hub/ingest ─▶ hub/fleetmodel (reports) ─▶ hub/api, hub/metrics, watch ─▶ fleet get
//	                    hub/ingest ─▶ hub/store (reports, batched)
//
// Secrets are encrypted at rest by the store (with the key in
// <data-dir>/secrets.key) and leave the hub only inside a device's
// DesiredState, sealed to that device's own public key by the
// controller.
//
// hub/fleetmodel is the in-memory model of the fleet that the controller
// and the ingest write and everything else reads; neither of them imports
// the other. New wires the parts in that order: model, metrics, broker,
// controller, ingest (told to wake the controller on a changed report),
// API.
//
// The root only wires; every service is a leaf package it calls:
//
//	options.go   Options, their defaults and the checks New runs first
//	hub.go       New: keys, store, listeners, admin credential, parts
//	run.go       Run: the parts' lifecycle and a clean shutdown
//	routes.go    the hub's own routes on the API
//	admin.go     operations on a stopped hub's data directory
//	mqtt.go      the broker's authenticator, URLs, the deferred connection
//	mosquitto.go, audit.go, abuse.go, backlog.go: glue between parts
//	homeassistant.go  the discovery publisher over the model's devices (opt-in)
//
//	hub/pki         CA, server certificate, devices' client certificates, signing key
//	hub/enrollment  answers bootstrap clients' enrollment requests
//	hub/mosquitto   an external Mosquitto's passwd and acl, kept in sync
//	hub/adminconf   admin.conf and the admin credential
//	hub/memtrim     gives the heap a burst left behind back to the OS
//	hub/homeassistant  Home Assistant MQTT discovery configs and their publisher
//
// The hub must not import package client (the CLI's library);
// deps_test.go checks. admin.conf is a config file of the CLI's flat
// form, which hub/adminconf reads and writes itself, checked against the
// CLI's parser by cmd/fleet-hub's tests.
package hub
