// Package schema holds Fleet's fleet/v1 API types, the MQTT payloads, strict
// decoding of YAML and JSON manifests, defaulting and validation with field
// paths. It does no I/O.
package schema
