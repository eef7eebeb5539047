// Package api is the hub's HTTP API (hub/API.md): apply, list, watch,
// create, get, update and delete of Deployments, Devices, ConfigMaps and
// Secrets, and device token issue, behind bearer-token authentication.
// Every error is a schema.Status; bad input is a 4xx, never a 500.
//
// Secrets come from the store without their values (keys and sizes
// only), so no answer can carry one; a monitor credential may not read
// them at all (403).
//
// Roles (roles.go): admin does everything, viewer reads all but password
// hashes, the audit trail, logs and crash reports, monitor reads status,
// events, metrics and the dashboard only (Deployments without their pod
// template). Every write, credential change, exec and log request, token
// use and refused authentication goes to the audit trail (audit.go),
// stored and logged.
//
// Server is an http.Handler. More routes (metrics, device status) are added
// with Server.Handle, which applies the same authentication, roles, audit,
// logging and panic recovery.
package api
