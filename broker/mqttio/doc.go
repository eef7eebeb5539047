// Package mqttio holds what every MQTT client of Fleet shares below paho:
// the hub's connection to an external broker (broker.DialExternal), the
// edge agent's session and enrolment, the agent's `check`, the CLI and the
// scale suite's monitor.
//
//   - The broker URL rules (schemes, default ports) are schema's
//     (schema.ParseBrokerURL), so that the CLI, which links no MQTT
//     client, shares them too.
//   - TLSConfig builds a client's TLS configuration from an optional base
//     and an optional CA file.
//   - Dial opens the network connection a URL names, TCP or TLS; and
//     BufferedConn makes paho's small reads cheap.
//
// It is a leaf: it imports the standard library, paho and schema only, so that the edge
// agent, which must not link the rest of broker/ (the embedded broker,
// mochi-mqtt), can use it. cmd/fleet-agent's dependency guard allows this
// package and no other under broker/.
package mqttio
