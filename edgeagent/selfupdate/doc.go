// Package selfupdate replaces the running fleet-agent with the release its
// signed desired state names (desiredState.agent), in a way that cannot
// leave the device without a working agent.
//
// The binaries live in one directory, the Layout (install.sh makes
// /usr/local/lib/fleet-agent, and /usr/local/bin/fleet-agent, which the
// systemd unit runs, is a link to its current):
//
//	<dir>/v1.4.0     a release's binary, named after its version
//	<dir>/v1.5.0
//	<dir>/current -> v1.4.0   what every start runs (the unit, a reboot)
//	<dir>/next    -> v1.5.0   the binary in trial, while there is one
//
// The switch, step by step (Updater, then Trial):
//
//  1. The Updater gets the binary for this architecture: it pulls the
//     image through containerd (the registry, mirrors and credentials of
//     the pods) and copies /fleet-agent out of its layers into
//     <dir>/.<version>.part, hashing it on the way. A SHA-256 other than
//     the signed digest is refused: the file is deleted, the agent keeps
//     running and reports Failed with why.
//  2. The binary is fsynced and renamed to <dir>/<version>; a next link is
//     made beside and renamed over next; the record (<state-dir>/
//     agent-upgrade.json) says Trial. current is untouched.
//  3. The running agent stops its work (containers keep running, as across
//     any restart of the agent) and, as the same process, starts next as a
//     child in a trial, with its own arguments, and a pipe on which the
//     child says when it has adopted the containers, when it has connected
//     to the broker and when a status with its version was published.
//  4. Reported within the deadline: next is renamed over current, the child
//     is stopped and the process executes current (its PID stays: systemd
//     sees one service throughout). The new agent finds the record in
//     Trial for its own version and reports Updated.
//     Exited, not connected or not reported within the deadline: the child
//     is killed, next removed, the record says Failed with why, and the
//     process executes current, the previous binary, which reports it.
//  5. A power cut at any step boots current, which only a successful
//     trial ever renames: the previous binary, or the new one once it
//     passed. A trial found interrupted is tried again, twice at most.
//
// The child dies with its parent (PR_SET_PDEATHSIG), so killing the
// agent's process kills the trial too, and the next start is the plain
// start of current.
package selfupdate
