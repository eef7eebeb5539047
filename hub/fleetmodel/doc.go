// Package fleetmodel is the hub's in-memory model of the fleet: the
// registered devices (name, uid, labels), the desired state each one was
// given, the last thing each one reported (status, online flag, last seen,
// recent events) and what follows from it (online, stale, converged), and
// the deployments' aggregated statuses. It is the one place the hub's
// parts meet:
//
//	store ──▶ hub/controller ──▶ fleetmodel (devices, desired states, deployment statuses)
//	                   └──▶ publisher ──▶ retained .../desired and deployment status topics
//	status topics ──▶ hub/ingest ──▶ fleetmodel (reports) ──▶ API, metrics, watch
//
// Ownership: the controller's goroutine is the only writer of devices,
// desired states and deployment statuses, through the Writer it is handed;
// it reads them back without a lock, and writes them under the model's
// lock. The status ingest is the only writer of reports (UpdateReport,
// AddEvent, LoadReports); the controller only drops the report of a device
// it removes. Every other read goes through Model's methods, under the
// lock. The model imports neither the controller nor the ingest, so
// neither imports the other.
//
// The device, online and converged counts behind the fleet_devices*
// gauges are kept up to date device by device as the model changes; a
// scrape reads them without looking at every device.
package fleetmodel
