// Package broker is Fleet's MQTT layer: the embedded broker (mochi-mqtt v2)
// with Fleet's authentication and per-device ACL, the Conn transport the hub
// uses to publish desired state and receive status (in-process or over an
// external broker), and the configuration Fleet needs to run against
// Mosquitto instead.
//
// Access rules live in one pure function, Allowed; the embedded broker, the
// rendered Mosquitto ACL file and the tests all follow it.
package broker
