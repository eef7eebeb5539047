// Package homeassistant makes Fleet's devices appear in Home Assistant
// through its MQTT discovery protocol, without a second status topic.
//
// Configs is a pure function: one device in, its discovery configs out
// (topic and retained JSON payload). Every entity reads the topics Fleet
// already has: the connectivity sensor reads the device's online topic,
// the others read the device's retained status topic through a
// value_template over Fleet's own DeviceStatus JSON. Every config carries
// the same availability (the online topic, payloads "online" and
// "offline"), a device block and a unique_id derived from the device's
// uid, so it is identical across hub restarts. Nothing in a config is
// secret: topics, names, the agent's version and the hub's.
//
// Publisher keeps the broker's retained configs equal to Configs over the
// hub's device set, level-triggered: each pass computes the whole wanted
// set and publishes what differs from what the broker holds (it watches
// the discovery topics, so configs left by a device deleted while the hub
// was down are cleared too); a deleted device's configs are cleared with
// an empty retained payload, which is how Home Assistant removes
// entities.
//
// Templates keep to a small subset of Home Assistant's Jinja templates
// (paths under value_json, the filters length, list, sum, selectattr,
// rejectattr and map(attribute=…), and one comparison), so that the
// end-to-end test can render every one against a real status payload.
package homeassistant
