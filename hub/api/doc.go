// Package api is the hub's HTTP API (hub/API.md): apply, list, watch,
// create, get, update and delete of Deployments and Devices, and device
// token issue, behind bearer-token authentication. Every error is a
// schema.Status; bad input is a 4xx, never a 500.
//
// Server is an http.Handler. More routes (metrics, device status) are added
// with Server.Handle, which applies the same authentication, logging and
// panic recovery.
package api
