// Package ingest receives what agents publish — status, online, events and
// crash reports —
// over the hub's MQTT connection, checks it, writes the latest report of
// every device into the fleet model (hub/fleetmodel), and writes reports to
// the store in batches.
//
// Data flows one way: status topics → ingest → fleet model → API, metrics,
// watch; and ingest → store (reports, fleet/arch labels). The ingest reads
// from the model which devices exist; it tells the controller that a
// report changed only through Options.OnChange. It imports neither the
// controller nor the API.
//
// Bad input never corrupts state: a payload that does not decode, does not
// validate, is too large, or names another device than its topic is
// counted (fleet_mqtt_malformed_payloads_total), logged at a limited rate
// and dropped; the device's last good report stays.
//
// A status's publicKey enters the report only if it is the device's bound
// key (keys.go): the first key bound at enrollment or first report, or the
// next one after `fleet device rekey`. Another key is refused (counted in
// fleet_hub_device_key_refused_total, logged, raised as a Warning
// DeviceKeyRefused event) and the report keeps the bound key, so the
// controller never seals Secrets to it.
package ingest
