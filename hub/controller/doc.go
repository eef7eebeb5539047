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
// # A pass, and who runs it
//
// A leader runs Run: it loads the store, watches it, and runs a pass
// whenever something changed (a store event, a report after
// StatusDebounce, a staged rollout's recheck time, a retry, the resync).
// Controller.pass (pass.go) is the whole orchestration, in one place; the
// stages are, in order:
//
//  1. the placer (place.go, compute.go, staged.go): deployments and
//     devices → each device's pods. It places everything (placeAll) or
//     only what the change set can have changed (placeIncrementally,
//     which declines, and the pass places everything, when that is no
//     cheaper), and keeps the staged rollouts, whose records it stores
//     before anything that follows from them; a rollout the planner rolled
//     back it then writes to the Deployment as an undo (autorollback.go).
//  2. the desired writer (desired.go, commit.go, config.go, seal.go):
//     pods → DesiredStates with their ConfigMaps and sealed Secrets; it
//     detects which changed, commits them to the store in chunks (with
//     generation tombstones for removed devices), records them in the
//     model and publishes them (desiredTopics).
//  3. the status aggregator (aggregate.go, ports.go): deployment statuses,
//     counted device by device, with their rollout and PortConflict
//     conditions; recorded in the model and published (statusTopics).
//
// Each stage holds its own state and reads the fleet through fleetView,
// which it cannot change; what the stages learn of a change is the
// changeSet (changes.go), filled by the watch and the status inbox and
// cleared by the pass. A stage that fails returns its error; the pass
// alone decides to retry (a full pass a second later).
//
// # The other files
//
//   - controller.go: Options, the Controller's wiring, the status inbox.
//   - load.go: reading the store (loader, a snapshot) and applying the
//     watch's events to the fleet (fleet.go: the devices, deployments and
//     label index, index.go) and to the configuration.
//   - publish.go: the sender, which runs the publishes, and the two sets
//     of retained topics it serves.
//   - agents.go: the AgentRollouts. Each full pass plans them with
//     hub/agentplan (the Deployments' staged planner over agent versions),
//     names the agent in the selected devices' desired state, stores the
//     planner's state (store.AgentRolloutKey) and the rollouts' status.
//     While any exists every pass is full: any report can move one.
//   - restorehold.go: generations never go backwards across a restore: a
//     device restored from a backup is sent nothing until it reports,
//     then continues above the generation it reported.
package controller
