// Package schema holds Fleet's fleet/v1 API types, the MQTT payloads, strict
// decoding of YAML and JSON manifests, defaulting and validation with field
// paths. It does no I/O.
//
// The table of kinds (kinds.go, Kinds) is the one list of the kinds: each
// kind's resource, singular, short names, list kind and Go type. The store's
// keys, the API's collections, the client, the CLI's resource types and
// fleet explain (package fielddoc/explain) all read it, so a new kind is a
// row there and its own type file; the field docs (zz_fielddocs.go) are
// generated from the type's doc comments.
package schema
