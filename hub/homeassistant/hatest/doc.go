// Package hatest checks Home Assistant MQTT discovery configs the way
// Home Assistant would read them, for tests: Check applies the documented
// schema rules (topic shape, full key names, required keys, the device
// block, availability), and Render evaluates the small subset of Jinja
// templates Fleet's configs use against a real payload. Home Assistant
// itself does not install here; this is its documented contract, as code.
package hatest
