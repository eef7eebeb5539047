// Package controller turns Deployments and Devices into one full
// DesiredState per device, stores it, publishes it retained, and counts
// each deployment's status from what the devices report.
//
// Data flows one way: store → controller → fleet model (hub/fleetmodel)
// and publisher → retained topics. The controller is the fleet model's one
// writer of devices, desired states and deployment statuses; it reads the
// agents' reports back through a StatusSource (the model), never from the
// status ingest.
//
// The files follow the concerns, each with only the access it needs:
//
//   - load.go: reading the store (loader, a snapshot) and applying the
//     watch's events to the model and the caches.
//   - pass.go: the loop and one pass, full or incremental.
//   - compute.go: placement as pure functions: placeAll (everything),
//     placeIncrementally (what a change can have changed; it declines, and
//     the pass falls back to placeAll, when that is no cheaper),
//     PlaceDeployment (one deployment's rollout budget), and the status
//     aggregation.
//   - index.go, aggregate.go: the label index, and deployment statuses
//     kept device by device.
//   - config.go, seal.go: the ConfigMaps and Secrets each device's pods
//     use, resolved into its DesiredState, Secrets sealed to the device's
//     own key; which devices a changed object reaches.
//   - commit.go: writing desired states and tombstones (desiredStore).
//   - publish.go: the publisher, which publishes what changed, retained.
package controller
