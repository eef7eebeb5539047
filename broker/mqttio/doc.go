// Package mqttio holds what every MQTT client of Fleet shares below paho:
// the hub's connection to an external broker (broker.DialExternal), the
// edge agent's session and enrolment, the agent's `check`, the CLI and the
// scale suite's monitor.
//
//   - ParseBrokerURL checks a broker URL (tcp://, mqtt://, ssl://, tls://,
//     mqtts://) and fills in the default port (1883, or 8883 for TLS);
//     IsTLS and HostPort answer the questions callers ask of one.
//   - TLSConfig builds a client's TLS configuration from an optional base
//     and an optional CA file.
//   - Dial opens the network connection a URL names, TCP or TLS; and
//     BufferedConn makes paho's small reads cheap.
//
// It is a leaf: it imports the standard library only, so that the edge
// agent, which must not link the rest of broker/ (the embedded broker,
// mochi-mqtt), can use it. cmd/fleet-agent's dependency guard allows this
// package and no other under broker/.
package mqttio
