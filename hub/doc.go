// Package hub assembles the Fleet control plane: it opens the store,
// makes sure an admin credential exists (writing <data-dir>/admin.conf),
// and serves the HTTP API until its context ends. The MQTT broker, the
// controller and the status ingest plug in here as further parts.
package hub
