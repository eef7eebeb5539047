package test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// TestE2EUpdateLockHoldsUpdates: a container holding an flock on a file
// in /run/fleet/lock (the directory the agent mounts because of
// spec.updateLock) holds off its own replacement, on a real fleet-agent
// and containerd:
//   - until it releases the lock: the old task keeps running meanwhile
//     (same PID), status names the holder and since when;
//   - a holder killed with -9 releases it, and the update goes on;
//   - a holder that never releases it is overridden at the deadline
//     (onDeadline: force).
func TestE2EUpdateLockHoldsUpdates(t *testing.T) {
	t.Parallel() // mostly waits for lock deadlines; devices lock-*
	f := StartFleet(t, FleetOptions{Agents: 1, DevicePrefix: "lock", Labels: func(int) map[string]string { return e2eAgents }})
	dev := f.Devices()[0]
	const name = "e2e-lock"
	f.deleteOnCleanup(t, name)
	lockDir := filepath.Join(f.Agent(t, dev).StateDir, "locks", name)
	lock := func(deadline string) map[string]any {
		return map[string]any{"updateLock": map[string]any{"deadline": deadline, "onDeadline": "force"}}
	}
	rev := func(n int, deadline string) e2eDep {
		// Each revision's holder waits for its own release file.
		holder := []string{"spawn-hold-lock", "/run/fleet/lock/updates.lock", "/run/fleet/lock/release-" + strconv.Itoa(n), "sleep", "forever"}
		return e2eDep{Name: name, Args: holder, Env: map[string]string{"REV": strconv.Itoa(n)}, Spec: lock(deadline)}
	}

	// 1. Released by the holder.
	f.applyDeps(t, rev(1, "10m"))
	h1 := f.PodHash(t, name)
	c1 := f.AwaitContainerRunning(t, dev, name, h1)
	awaitLockTaken(t, lockDir)
	f.applyDeps(t, rev(2, "10m"))
	h2 := f.PodHash(t, name)
	u := awaitLockHeld(t, f, dev, name, h2)
	if c := f.AwaitContainerRunning(t, dev, name, h1); c.PID != c1.PID {
		t.Fatalf("v1's task changed while it held the lock: pid %d, was %d", c.PID, c1.PID)
	}
	if out := f.CLI(t, "get", "pods", name, "-o", "wide"); !strings.Contains(out, "update lock held by updates.lock: pid") {
		t.Errorf("fleet get pods -o wide does not say who holds the lock:\n%s", out)
	}
	t.Logf("held: %s", u.Message)
	if err := os.WriteFile(filepath.Join(lockDir, "release-1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	f.AwaitContainerRunning(t, dev, name, h2)
	t.Logf("switched %v after the holder released the lock", time.Since(released).Round(time.Millisecond))

	// 2. The holder is killed with -9: the kernel releases its lock.
	awaitLockTaken(t, lockDir)
	f.applyDeps(t, rev(3, "10m"))
	h3 := f.PodHash(t, name)
	u = awaitLockHeld(t, f, dev, name, h3)
	pid := holderPID(t, u.LockHolder)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 the lock holder %d: %v", pid, err)
	}
	killed := time.Now()
	f.AwaitContainerRunning(t, dev, name, h3)
	t.Logf("switched %v after the holder was killed", time.Since(killed).Round(time.Millisecond))

	// 3. Never released: the deadline (20 s) forces the update.
	awaitLockTaken(t, lockDir)
	f.applyDeps(t, rev(4, "20s"))
	h4 := f.PodHash(t, name)
	u = awaitLockHeld(t, f, dev, name, h4)
	if u.Until == nil || u.LockSince == nil || u.Until.Sub(*u.LockSince) != 20*time.Second {
		t.Errorf("update %+v: want a deadline 20 s after the lock was found held", u)
	}
	f.AwaitContainerRunning(t, dev, name, h4)
	if u.LockSince != nil {
		t.Logf("forced %v after the lock was found held (deadline 20s)", time.Since(*u.LockSince).Round(time.Millisecond))
	}
}

// awaitLockHeld waits until dev reports pod name's update to hash held by
// its update lock, and returns the update.
func awaitLockHeld(t *testing.T, f *Fleet, dev, name, hash string) schema.PodUpdate {
	t.Helper()
	var got schema.PodUpdate
	f.AwaitDevices(t, e2eConverge, "update "+hash[:8]+" held by the update lock", podReported(name, func(p schema.PodStatus) bool {
		if u := p.Update; u != nil && u.Hash == hash && u.Reason == schema.UpdateReasonLock && u.LockHolder != "" && u.LockSince != nil {
			got = *u
			return true
		}
		return false
	}), dev)
	return got
}

var holderRE = regexp.MustCompile(`pid (\d+)`)

func holderPID(t *testing.T, holder string) int {
	t.Helper()
	m := holderRE.FindStringSubmatch(holder)
	if m == nil {
		t.Fatalf("lock holder %q names no pid", holder)
	}
	pid, _ := strconv.Atoi(m[1])
	return pid
}

// awaitLockTaken waits until the running revision's holder has taken its
// flock on dir/updates.lock, testing it as the agent does (a
// non-blocking flock of its own, released at once).
func awaitLockTaken(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(e2eConverge)
	for {
		if f, err := os.Open(filepath.Join(dir, "updates.lock")); err == nil {
			err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
			f.Close() // releases a lock it took
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no process took the lock on %s/updates.lock within %v", dir, e2eConverge)
		}
		time.Sleep(pollEvery) // poll interval
	}
}
