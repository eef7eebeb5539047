package reconcile

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

// Updates on the site's terms. A pod whose new revision would replace a
// running older one (its containers exist with another hash) may be held
// back:
//   - by its update window (schema.UpdateWindow): outside it the new
//     revision's images are pulled ahead (Prepare actions) and the old
//     version keeps running until the window opens; UpdateNow skips it;
//   - by its update lock (schema.UpdateLock): while a process of the pod
//     holds a flock on a file in the lock directory the agent mounts in
//     its containers, up to the lock's deadline, then per its policy
//     (force replaces it, wait keeps waiting).
//
// A pod with nothing running yet (a first install) is never held, nor a
// pod going back to its steady revision after a failed one. The holds
// are computed before Diff (they read the clock and the lock files) and
// handed to it in Policy.Holds: Diff stays pure.

// Hold is why a pod's replacement waits.
type Hold struct {
	// Reason is schema.UpdateReasonWindow or schema.UpdateReasonLock.
	Reason string
	// Until is when the window opens, or the lock's deadline.
	Until time.Time
	// Holder and Since say who holds the lock, since when.
	Holder string
	Since  time.Time
	// Message says it in one line.
	Message string
}

// lockPoll is how often the agent looks at a held update lock again
// (flock has no notification of release).
const lockPoll = time.Second

// lockSeen is when the agent first found a pod's lock held for the
// revision Hash.
type lockSeen struct {
	hash   string
	since  time.Time
	forced bool
}

// updateGate computes the holds; it is the Reconciler's, touched by the
// Run goroutine only.
type updateGate struct {
	loc      *time.Location
	lockRoot string
	seen     map[string]lockSeen // by pod
}

// lockDir is the host directory mounted as pod's update lock directory.
func (g *updateGate) lockDir(pod string) string { return filepath.Join(g.lockRoot, pod) }

// pendingReplace reports whether pod p (its hash) would replace a running
// older revision: containers of p's name with another hash exist.
func pendingReplace(p schema.Pod, hash string, observed []runtime.Container) bool {
	for _, c := range observed {
		if c.Pod == p.Name && c.PodHash != "" && c.PodHash != hash {
			return true
		}
	}
	return false
}

// holds returns the pods whose replacement waits now, and when to look
// again (zero: no need).
func (g *updateGate) holds(pods []schema.Pod, observed []runtime.Container, ro state.Rollouts, now time.Time, events Recorder) (map[string]Hold, time.Time) {
	out := map[string]Hold{}
	var wake time.Time
	soon := func(t time.Time) {
		if !t.IsZero() && (wake.IsZero() || t.Before(wake)) {
			wake = t
		}
	}
	for _, p := range pods {
		hash := podHash(p)
		if f := ro[p.Name].Failed; (f != nil && f.Hash == hash) || !pendingReplace(p, hash, observed) {
			delete(g.seen, p.Name)
			continue
		}
		if w := p.UpdateWindow; w != nil && !p.UpdateNow {
			loc := w.Location(g.loc)
			if open, until, next := w.Open(now, loc); !open {
				h := Hold{Reason: schema.UpdateReasonWindow, Until: next, Message: "waiting for window until " + next.In(loc).Format(time.RFC3339)}
				if next.IsZero() {
					h.Message = "waiting for window (none within a year: check spec.updateWindow.schedule)"
				}
				out[p.Name] = h
				soon(next)
				continue
			} else {
				soon(until)
			}
		}
		if p.UpdateLock == nil {
			continue
		}
		holder, held := lockHolder(g.lockDir(p.Name))
		if !held {
			delete(g.seen, p.Name)
			continue
		}
		s, ok := g.seen[p.Name]
		if !ok || s.hash != hash {
			s = lockSeen{hash: hash, since: now}
			events.Record(schema.EventNormal, "UpdateLocked", p.Name, "", fmt.Sprintf("update to revision %s waits: update lock held by %s", shortHash(hash), holder))
		}
		deadline := s.since.Add(p.UpdateLock.LockDeadline())
		policy := p.UpdateLock.Policy()
		if now.Before(deadline) || policy == schema.LockWait {
			msg := fmt.Sprintf("update lock held by %s since %s; waiting until %s, then %s", holder, s.since.Format(time.RFC3339), deadline.Format(time.RFC3339), policy)
			if !now.Before(deadline) {
				msg = fmt.Sprintf("update lock held by %s since %s; deadline %s passed, waiting for its release (onDeadline: wait)", holder, s.since.Format(time.RFC3339), deadline.Format(time.RFC3339))
			}
			out[p.Name] = Hold{Reason: schema.UpdateReasonLock, Until: deadline, Holder: holder, Since: s.since, Message: msg}
			soon(now.Add(lockPoll))
		} else if !s.forced {
			s.forced = true
			events.Record(schema.EventWarning, "UpdateLockForced", p.Name, "", fmt.Sprintf("update lock held by %s since %s past its deadline: replacing the pod (onDeadline: force)", holder, s.since.Format(time.RFC3339)))
		}
		g.seen[p.Name] = s
	}
	return out, wake
}

// ensureLockDir makes pod's update lock directory, writable by any user
// of the pod's containers (sticky, like /tmp), and returns its path.
func (g *updateGate) ensureLockDir(pod string) (string, error) {
	dir := g.lockDir(pod)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("update lock directory: %w", err)
	}
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		return "", fmt.Errorf("update lock directory: %w", err)
	}
	return dir, nil
}

// updateStatus adds to st, the status of desired pod p, its pending
// update: Downloading while the new revision's images are pulled,
// Waiting while held, Downloaded when it replaces the running version
// now, Switched once it runs (reported for pods with a window or a
// lock). While held, the status is that of the revision that runs
// (running is its status, when the agent knows its spec), with the
// message saying what it waits for.
func updateStatus(st schema.PodStatus, p schema.Pod, hash string, pending bool, prepared bool, hold *Hold, running *schema.PodStatus) schema.PodStatus {
	if !pending {
		if (p.UpdateWindow != nil || p.UpdateLock != nil) && st.Hash == hash && st.FailedRevision == nil {
			st.Update = &schema.PodUpdate{Hash: hash, State: schema.UpdateSwitched}
		}
		return st
	}
	u := &schema.PodUpdate{Hash: hash, State: schema.UpdateDownloading, Message: "downloading revision " + shortHash(hash)}
	switch {
	case hold != nil && prepared:
		u.State = schema.UpdateWaiting
	case hold == nil && prepared:
		u.State, u.Message = schema.UpdateDownloaded, "revision "+shortHash(hash)+" downloaded; switching"
	}
	if hold != nil {
		u.Reason, u.Message = hold.Reason, hold.Message
		if prepared {
			u.Message = "downloaded; " + hold.Message
		}
		u.Until = timePtr(hold.Until)
		u.LockHolder = hold.Holder
		if !hold.Since.IsZero() {
			u.LockSince = timePtr(hold.Since)
		}
		if running != nil {
			st = *running
		}
		st.Message = u.Message
	}
	st.Update = u
	return st
}

// prepared reports whether every container of revision hash of p has
// its image (Prepared in hist).
func preparedRevision(p schema.Pod, hash string, hist state.History) bool {
	for _, c := range podContainers(p) {
		if !hist[state.Key{Pod: p.Name, Container: c.Name, Hash: hash}].Prepared {
			return false
		}
	}
	return true
}

// runningRevision returns the revision of pod name that runs, other than
// hash, among the revisions the agent remembers (current, steady).
func runningRevision(name, hash string, observed []runtime.Container, ro state.Rollouts) *schema.Pod {
	r := ro[name]
	for _, rev := range []*state.Revision{r.Current, r.Steady, r.Previous} {
		if rev == nil || rev.Pod.Hash == hash {
			continue
		}
		for _, c := range observed {
			if c.Pod == name && c.PodHash == rev.Pod.Hash {
				p := rev.Pod
				return &p
			}
		}
	}
	return nil
}
