// Package hub assembles the Fleet control plane: it opens the store,
// makes sure an admin credential exists (writing <data-dir>/admin.conf),
// runs the embedded MQTT broker (or connects to an external one), the
// controller that publishes every device's desired state
// (hub/controller), the status ingest (hub/ingest), and serves the HTTP
// API (hub/api) with the hub's own routes (/v1/info, device events,
// Mosquitto files, /metrics) until its context ends.
package hub
