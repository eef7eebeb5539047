// Package api is the hub's HTTP API (hub/API.md): apply, list, watch,
// create, get, update and delete of Deployments, Devices, ConfigMaps and
// Secrets, and device token issue, behind bearer-token authentication.
// Every error is a schema.Status; bad input is a 4xx, never a 500.
//
// Secrets come from the store without their values (keys and sizes
// only), so no answer can carry one; a monitor credential may not read
// them at all (403).
//
// Server is an http.Handler. More routes (metrics, device status) are added
// with Server.Handle, which applies the same authentication, logging and
// panic recovery.
package api
