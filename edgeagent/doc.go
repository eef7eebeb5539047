// Package edgeagent is Fleet's edge agent: it keeps a persisted copy of
// the device's desired state, reconciles the container runtime toward it
// in a level-triggered loop, and reports status over MQTT.
//
// The parts are small packages: state (persistence), desired (the one
// slot a DesiredState payload waits in, from MQTT to the reconciler),
// reconcile (the pure Diff and the loop), session (the MQTT connection),
// status (status and events), clock, backoff and wake, and runtime (the
// container runtime interface, its Fake and, in runtime/containerd, the
// real one). Agent wires them; many agents can run in one process (tests,
// hollow agents of the scale suite), each with its own Runtime and state
// directory:
//
//	a, err := edgeagent.New(edgeagent.Options{Device: "pi-1", Broker: "tcp://hub:1883",
//		Token: tok, StateDir: dir, Runtime: rt, Logger: log})
//	...
//	err = a.Run(ctx) // until ctx is done; containers keep running
//
// # Behaviour an operator can rely on
//
//   - Start-up reconciles from the persisted desired state before any
//     network, so a device that reboots without connectivity runs (and
//     restarts, per policy) its containers.
//   - Stopping the agent never stops containers; a restarted agent adopts
//     running containers by their labels and restarts none that are
//     healthy. Restart counts and crash-loop backoff survive restarts.
//   - With no desired state at all (first boot, unreadable state file) the
//     agent removes nothing: "nothing known" is not "nothing desired".
//   - A malformed payload, a payload for another device and an older
//     generation from the same hub store change nothing; the first is
//     logged, raised as an InvalidDesiredState event and named in the
//     status message. A different store is a new hub database: accepted.
//   - An empty retained payload (the hub clearing the topic when the
//     device is removed) does not remove workloads: the agent keeps its
//     last state, logs, raises DesiredStateCleared and says so in status.
//     A hub that wants the device empty publishes a DesiredState with no
//     pods. Wiping a device because a retained message vanished (a broker
//     that lost its retained store, say) would break the autonomy promise.
//   - observedGeneration is the generation fully applied: every action
//     for it has been attempted, failures (a missing image, say) are
//     reported per pod and retried with capped, jittered backoff, and one
//     pod's slow pull never holds up the others.
//   - Updates are safe on the device. A pod's new revision is downloaded
//     before its running version is stopped: an image that cannot be
//     pulled leaves the running version running (status: the new hash,
//     ImagePullBackOff, "the running version keeps running"). A new
//     revision that never starts (one of its containers fails to be
//     created or started, or exits before it has run 30 s, three times;
//     or fails once under restartPolicy Never) is given up: the agent
//     runs the pod's last steady revision again, without a pull, and
//     does not retry the failed one until the desired revision changes,
//     across restarts too. Status then carries the new hash, phase
//     Failed, the failing container's reason (CrashLoopBackOff,
//     CreateContainerError, RunContainerError, ...) and a message such as
//     "revision 1a2b3c4d failed to start (container app: exit code 1, 3
//     times); the previous version runs again"; a RolledBack event says
//     the same. A pod with no steady revision yet (a first install)
//     crash-loops with backoff instead. Completing with exit code 0 under
//     Never or OnFailure is not a failure.
//   - The agent deletes only images it pulled itself, and only once the
//     device has converged: images nothing needs at once, the images of
//     each pod's previous steady revision (kept for a fast undo) only
//     while free space on the filesystem holding the images is below
//     Options.ImageGCMinFree (default 10 %; flag --image-gc-min-free),
//     oldest first. Each collection that deletes something raises an
//     ImageGC event naming the images.
//   - Status is retained, coalesced to at most one publish per second, and
//     republished after every reconnect and 24-30 s after the last publish
//     (jittered, so a fleet that reported at once does not stay in step:
//     the hub would see a burst of every device each 30 s). Events are
//     rate-limited per reason, pod and container, so a crash loop cannot
//     flood a cellular link.
//
// MQTT details (clean session, reconnect with jitter, last will) are
// explained in package session.
package edgeagent
