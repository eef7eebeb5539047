package test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/pki"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/etcdtest"
)

// standbyDevices is how many devices TestE2EStandbyHubMemory registers:
// FLEET_STANDBY_DEVICES, default 1,000.
func standbyDevices() int {
	if n, err := strconv.Atoi(os.Getenv("FLEET_STANDBY_DEVICES")); err == nil && n > 0 {
		return n
	}
	return 1000
}

// TestE2EStandbyHubMemory measures (reports, never asserts) the memory a
// hub spends per registered device as the leader and as a standby: two
// fleet-hub processes on a real 3-member etcd cluster, N devices with
// their tokens registered through the leader, the RSS of each process
// read once the standby lists all N (none is connected: it is the
// registry's cost, not the sessions').
func TestE2EStandbyHubMemory(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{TLS: true})
	const prefix = "/fleet/standbymem/"
	a := StartHub(t, HubOptions{Args: append(etcdArgs(c, prefix), "--hub-id", "hub-a")})
	dirB := filepath.Join(t.TempDir(), "fleet-data")
	for _, f := range []string{store.SecretKeyFileName, pki.CACertName, pki.CAKeyName, pki.SigningKeyName, "admin.conf"} {
		copyFile(t, filepath.Join(a.DataDir, f), filepath.Join(dirB, f))
	}
	b := StartHub(t, HubOptions{DataDir: dirB, Args: append(etcdArgs(c, prefix), "--hub-id", "hub-b")})
	p := pairOf(a, b)
	p.awaitLeaderIs(t, "hub-b", "hub-a", 2, 30*time.Second)

	rss := func(h *Hub) int64 { return procStatusBytes(t, h.PID(), "VmRSS") }
	emptyA, emptyB := rss(a), rss(b)
	n := standbyDevices()
	start := time.Now()
	addDevices(t, a, n)
	took := time.Since(start)
	awaitf(t, 60*time.Second, func() bool {
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		code, body := b.Do(t, http.MethodGet, "/v1/devices", nil)
		return code == http.StatusOK && json.Unmarshal(body, &list) == nil && len(list.Items) >= n
	}, "the standby lists all %d devices", n)
	var hubs schema.HubMemberList
	if err := json.Unmarshal(mustDo(t, b, http.MethodGet, "/v1/hubs", nil, http.StatusOK), &hubs); err != nil || hubs.Leader != "hub-a" {
		t.Fatalf("leader %q (%v), want hub-a", hubs.Leader, err)
	}
	fullA, fullB := rss(a), rss(b)
	perDev := func(full, empty int64) float64 { return float64(full-empty) / float64(n) / 1024 }
	t.Logf("%d devices with tokens registered through the leader in %s", n, took.Round(time.Millisecond))
	t.Logf("leader  hub-a: RSS %.1f MiB empty, %.1f MiB with %d devices: %.1f KiB a device",
		float64(emptyA)/(1<<20), float64(fullA)/(1<<20), n, perDev(fullA, emptyA))
	t.Logf("standby hub-b: RSS %.1f MiB empty, %.1f MiB with %d devices: %.1f KiB a device",
		float64(emptyB)/(1<<20), float64(fullB)/(1<<20), n, perDev(fullB, emptyB))
}
