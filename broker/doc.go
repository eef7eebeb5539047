// Package broker is Fleet's MQTT layer: the embedded broker (mochi-mqtt v2)
// with Fleet's authentication and per-device ACL, the Conn transport the hub
// uses to publish desired state and receive status (in-process or over an
// external broker), and the configuration Fleet needs to run against
// Mosquitto instead.
//
// Access rules live in one pure function, Allowed; the embedded broker, the
// rendered Mosquitto ACL file and the tests all follow it.
//
// Wills: the embedded broker publishes a client's will when the client is
// kicked or its connection ends without a DISCONNECT, as MQTT says, but not
// when the broker itself closes (a hub stopping or restarting). The devices
// are still there and reconnect to the next broker, which starts with no
// retained state of its own; an "offline" for every device would only
// flash on monitors that are being disconnected at the same moment.
//
// Retained messages: a subscription with a wildcard (a monitor's
// fleet/v1/devices/+/status) receives every matching retained message,
// written at the pace the subscriber reads and, at QoS 1, acknowledges
// them, with at most half of the client's in-flight window unacknowledged.
// mochi alone sends them in one burst and drops those beyond the window
// (QoS 1: 1,024 of a fleet's statuses) or beyond the client's outbound
// queue (QoS 0: 128 waiting to be written).
//
// Below it, broker/mqttio is the leaf every MQTT client of Fleet shares
// (the hub's external connection, the edge agent, the CLI): broker URLs,
// client TLS, dialling, buffered reads, paho's common options. It imports
// the standard library and paho only, so the agent links it without
// linking this package. For tests: brokertest runs this broker,
// mosquittotest a Mosquitto, mqttio/mqttiotest makes certificates.
package broker
