// Package edgeagent is Fleet's edge agent: it keeps a persisted copy of
// the device's desired state, reconciles the container runtime toward it
// in a level-triggered loop, and reports status over MQTT.
//
// The parts are small packages: state (persistence), desired
// (Admission, which judges a DesiredState payload from MQTT, its
// signature and its order, pins the hub's key and records the refusal
// status shows, all in one Verdict; and Inbox, the one slot an accepted
// state waits in for the reconciler), reconcile (the pure Diff and the loop), session
// (the MQTT connection), status (status and events), probe (the
// containers' liveness, readiness and startup probes), devicekey (the
// device's own key pair), podconfig (env and files from the desired
// state's ConfigMaps and Secrets), volumes (the pods' volumes on the
// device), trust (the hub's pinned signing key), clock, backoff and wake,
// and runtime (the container runtime interface, its Fake and, in
// runtime/containerd, the real one). Agent wires them; many agents can
// run in one process (tests, hollow agents of the scale suite), each with
// its own Runtime and state directory. A desired-state payload goes from
// the session to desired.Admission.Admit; the agent fans the Verdict out
// (counters, the event, a status republish) and the reconciler takes the
// accepted state from the inbox:
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
//     status message, and so are the other two (DesiredStateOtherDevice,
//     and DesiredStateReplayed unless the older state was merely
//     overtaken on the way: desired.ReplayGrace). A different store is a new hub
//     database: accepted when unsigned (first-use agents only) or signed by
//     another key (a rotation), else only above the generation applied.
//   - The hub's signing key is pinned (package trust: from --join,
//     --hub-signing-key, or enrollment over verified TLS). With none
//     pinned every state is refused (DesiredStateUntrusted) unless
//     Options.InsecureTrustFirstKey: then the first signed state's key
//     is pinned. A state of another store signed by the same key must
//     carry a higher generation. With a key pinned,
//     an unsigned state, a bad signature or another key's signature
//     changes nothing, and is logged, raised as DesiredStateUnsigned or
//     DesiredStateBadSignature and named in the status message; a new key
//     the pinned one endorses (a rotation on the hub) is pinned in its
//     place.
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
//     across restarts too. Status then shows what runs (the steady
//     revision's hash, phase, readiness and images) and, in
//     failedRevision, the new hash and the failing container's reason
//     (CrashLoopBackOff, CreateContainerError, RunContainerError, ...),
//     with a message such as
//     "revision 1a2b3c4d failed to start (container app: exit code 1, 3
//     times); the previous version runs again"; a RolledBack event says
//     the same. A pod with no steady revision yet (a first install)
//     crash-loops with backoff instead. Completing with exit code 0 under
//     Never or OnFailure is not a failure. The steady revision is the
//     last one that ran 30 s, whether or not it was still desired by
//     then: a revision replaced as desired by one whose image cannot be
//     pulled keeps running, becomes steady, and is what a later failing
//     revision falls back to (its images are kept).
//   - Updates happen on the site's terms (reconcile/update.go). A new
//     revision's images are pulled as soon as it is assigned, while the
//     running version runs. A pod with spec.updateWindow replaces a
//     running older revision only inside its window, read in the
//     device's zone (TZ, else /etc/localtime; reported as
//     status.agent.timeZone) unless it names one; a pod with
//     spec.updateLock only while no process holds a flock on a file in
//     the lock directory the agent mounts in its containers
//     (<state-dir>/locks/<pod> at updateLock.path), up to its deadline,
//     then per onDeadline. A first install and a fall back to the
//     steady revision are never held. status.pods[].update says
//     Downloading, Downloaded, Waiting (with why and until when, who
//     holds the lock and since when) or Switched.
//   - The agent deletes only images it pulled itself, and only once the
//     device has converged: images nothing needs at once, the images of
//     each pod's previous steady revision (kept for a fast undo) only
//     while free space on the filesystem holding the images is below
//     Options.ImageGCMinFree (default 10 %; flag --image-gc-min-free),
//     oldest first. Each collection that deletes something raises an
//     ImageGC event naming the images.
//   - Probes run on the device, on their own timers, online or not
//     (package probe): a liveness or startup probe that fails
//     failureThreshold times in a row gets the container stopped and
//     restarted through the crash-loop backoff (events Unhealthy, naming
//     the probe, then Killing; RESTARTS grows); a readiness probe decides
//     the pod's ready in status (republished as soon as it changes), and
//     a container with a startup probe is not ready before it succeeds.
//   - Init containers run one at a time, in order, each to completion,
//     before the pod's containers are created; a failing one is retried
//     with backoff (restartPolicy Never: the pod fails) and the pod shows
//     Pending with Init:Error or Init:CrashLoopBackOff and a message such
//     as "init container prepare failed (exit code 1); retrying in 20s".
//     A completed init container does not run again while the pod's
//     hash is unchanged, across agent restarts too.
//   - Status is retained, coalesced to at most one publish per second, and
//     republished after every reconnect and 24-30 s after the last publish
//     (jittered, so a fleet that reported at once does not stay in step:
//     the hub would see a burst of every device each 30 s). Events are
//     rate-limited per reason, pod and container, so a crash loop cannot
//     flood a cellular link.
//
// # Workloads: hardware, configuration, secrets, volumes
//
//   - Hardware. A container's devices are created in it with the host
//     node's type and numbers, and the device cgroup allows them with the
//     given permissions (docker run --device); a link on the host
//     (/dev/serial/by-id/…) is followed. A node that does not exist on the
//     device holds its pod back (CreateContainerConfigError, "device
//     /dev/ttyUSB0 does not exist on this device", an event) without
//     holding any other pod, and is looked for again with backoff: the pod
//     starts once it is plugged in. securityContext: privileged (every
//     capability, every host device, no masked paths or seccomp),
//     capabilities add and drop (with or without CAP_, drop ALL first),
//     runAsUser, runAsGroup, readOnlyRootFilesystem.
//   - The device key. At its first start the agent makes an X25519 key
//     pair, <state-dir>/device.key (0600), and reports its public half in
//     every status (publicKey) and in its enrollment request. The hub
//     seals every Secret value a device needs to that key; nothing else
//     can read them. A key file that cannot be read is not replaced: the
//     agent runs on, says so in status and pods that need a Secret wait.
//   - ConfigMaps and Secrets. env valueFrom and envFrom take values from
//     the desired state's ConfigMaps and Secrets (unsealed in memory and
//     never logged; a value reaches only the containers that use it: their
//     spec, which containerd keeps readable by root, and secret volumes,
//     a tmpfs unless the agent cannot mount one). A missing object
//     or key that is not optional, or a Secret sealed to another key,
//     holds the pod back with CreateContainerConfigError and a message
//     naming the object and key, never a value. When what a container's
//     env takes from them changes, the container is replaced (its pod
//     hash, which the hub compares, stays the template's; the container
//     carries a digest of its env in the label fleet.config-digest).
//     configMap and secret volumes are updated in place instead: running
//     containers see the new files without a restart, atomically (see
//     package volumes); secret volumes are a tmpfs, files 0400 unless
//     defaultMode says otherwise. imagePullSecrets (type
//     kubernetes.io/dockerconfigjson) give registry credentials to that
//     pod's pulls only.
//   - Volumes. emptyDir lives as long as the pod revision (medium Memory
//     is a tmpfs of sizeLimit); persistent volumes, under
//     <state-dir>/volumes/<pod>/<volume>, survive pod updates, rollbacks,
//     agent crashes and containerd restarts, and are removed when the pod
//     no longer runs on the device, unless reclaimPolicy is Retain;
//     hostPath is a directory of the device; volumeMounts take readOnly
//     and subPath (created in emptyDir and persistent volumes, never
//     followed through a symbolic link out of the volume).
//   - Stopping a container for an update or a removal runs its
//     lifecycle.preStop.exec hook in it first, then sends SIGTERM, and
//     SIGKILL once the pod's terminationGracePeriodSeconds (default 10 s,
//     Options.StopTimeout) have passed since the stop began.
//
// MQTT details (clean session, reconnect with jitter, last will) are
// explained in package session.
package edgeagent
