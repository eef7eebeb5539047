// Package rollout plans a Deployment's Staged rollout: which targeted
// devices run the new revision now, and which the last good one. Next is a
// pure function of its Input: no clock, no store, no MQTT. The hub calls it
// whenever something it reads changes (a device report, a device going
// online or offline, a new revision, an operator's pause) and at
// Plan.RecheckAt, persists Plan.State, and publishes the assignment. Because
// every input is explicit and the state is a small JSON struct, a hub that
// restarts mid-rollout and calls Next again with the persisted state
// computes the same plan.
//
// # Inputs
//
//   - Strategy: the Deployment's validated spec.strategy.staged. Its
//     defaults apply (schema.Staged's methods): progressDeadlineSeconds
//     600, minReadySeconds 0, failureThreshold 0, autoRollback false.
//   - Revision: the revision being rolled out (its pod spec hash), and
//     LastGood: the last revision whose rollout completed, the one a
//     rollback returns to; "" when there is none (a first rollout).
//   - Devices: every targeted device, each with its labels, whether it is
//     online and since when, the revision the hub assigns it now and since
//     when (AssignedAt: the caller records Now for the devices a plan names
//     in Plan.Added), and what it last reported about the new revision:
//     Ready and since when, or Failed (its pod crash-loops or its image
//     cannot be pulled) and why. What a device reports is only read when
//     it is assigned the new revision; an offline device's last report
//     stands.
//   - State: what the previous call returned (the zero State to start).
//     State.Paused is the operator's pause, set by the caller.
//   - Now: the time of the call.
//
// # Rules
//
// Steps. Step i lets StepTarget(i) devices run the new revision, counting
// those of the steps before (ceil(percent × targeted / 100), or devices,
// never decreasing, all of them from the last step on). A step never
// gives the new revision to more devices than that; devices that already
// run it keep it. The new revision goes first to devices that match
// selectorOrder (in the order of its entries), then, within each group, to
// online devices before offline ones, each by name, so the plan is
// deterministic.
//
// Health. A device on the new revision is healthy when it has reported it
// Ready for minReadySeconds. It has failed when it is online and either
// reports the revision Failed or has not been Ready for
// progressDeadlineSeconds counted from the latest of: when it was given
// the revision, when it last came online, and when it last stopped being
// Ready. So time spent offline is never held against a device, and a
// readiness blip shorter than the deadline is not a failure. A failed
// device keeps the new revision (the agent keeps the previous container
// running when the new one cannot start) and, below the failure
// threshold, does not hold the rollout back.
//
// Update windows. A device that reports holding the new revision back for
// its update window (Device.WindowOpensAt) is pending until the window
// opens, never failed, and its progress deadline counts from the opening.
//
// Offline devices. An offline device is pending, never failed, whatever
// it reported before. An offline device that has not proved healthy holds
// the rollout back at most progressDeadlineSeconds after it was given the
// new revision; after that the rollout goes on without it and it stays
// pending: it runs the new revision when it comes back and is judged from
// then (a failure then still counts, until the rollout is final). Waves
// take online devices first, so offline devices are normally reached only
// by the last step.
//
// Progress. The next step starts when every device on the new revision is
// healthy, failed, or offline past that wait, and the current step's pause
// (counted from the moment that became true) is over. After the last step
// the same condition completes the rollout (Phase Complete): every device
// is assigned the new revision, and the caller may record it as the last
// good one. While State.Paused is set no step starts and no device gets
// the new revision, but failures are still counted.
//
// Failures. When the failed devices reach failureThreshold (a count, or a
// percentage of the targeted devices rounded up; 0 means the first
// failure) the rollout stops. With autoRollback and a last good revision,
// every device is assigned the last good revision and the phase is
// RolledBack; otherwise the phase is Stopped and the devices stay where
// they are. Either way State.Reason says why in one line. Complete,
// Stopped and RolledBack are final for the revision: a new revision, or a
// zero State from the caller, starts a new rollout. A device that joins a
// complete rollout gets the new revision at once; after a rollback every
// device, joining ones too, gets the last good revision.
//
// A State for another revision than Input.Revision is discarded, except
// for Paused: a new revision starts at the first step. Rolling out the
// last good revision itself (an undo to it) is Complete at once: every
// device may run it.
//
// Output. Plan.New and Plan.Old split the devices; Plan.Added are the
// devices newly given the new revision; Plan.Status has the counts and
// says in one line what the rollout waits for and until when; the caller
// calls Next again at Plan.RecheckAt, or sooner when an input changes.
package rollout
