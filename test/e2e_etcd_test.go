package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/pki"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/etcdtest"
)

// etcdArgs are fleet-hub's flags for cluster c under prefix, over TLS
// with the cluster's client certificate.
func etcdArgs(c *etcdtest.Cluster, prefix string) []string {
	ca, crt, key := c.CertFiles()
	return []string{"--store", "etcd://" + strings.Join(c.HostPorts(), ","), "--etcd-prefix", prefix,
		"--etcd-cacert", ca, "--etcd-cert", crt, "--etcd-key", key}
}

// getObject GETs kind/name from h and decodes its metadata.
func getMeta(t *testing.T, h *Hub, path string) (int, schema.ObjectMeta) {
	t.Helper()
	code, body := h.Do(t, http.MethodGet, path, nil)
	var obj struct {
		Metadata schema.ObjectMeta `json:"metadata"`
	}
	if code == http.StatusOK {
		if err := json.Unmarshal(body, &obj); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, body)
		}
	}
	return code, obj.Metadata
}

// TestE2EEtcdStore: real fleet-hub processes keep their state in a real
// 3-member etcd cluster over TLS with client certificates: writes through
// the API survive kill -9 of the hub, a stale resourceVersion gets 409, and
// a second hub given the first one's key files serves the same fleet.
func TestE2EEtcdStore(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{TLS: true})
	h := StartHub(t, HubOptions{Args: etcdArgs(c, "/fleet/e2e/")})
	if code, body := h.Do(t, http.MethodPost, "/v1/apply", []byte(webYAML("web", "nginx:1", map[string]string{"site": "a"}))); code != http.StatusOK {
		t.Fatalf("apply: %d %s", code, body)
	}
	code, before := getMeta(t, h, "/v1/deployments/web")
	if code != http.StatusOK {
		t.Fatalf("GET web: %d", code)
	}
	stale := strings.Replace(webYAML("web", "nginx:2", map[string]string{"site": "a"}), "metadata:\n", "metadata:\n  resourceVersion: \"1\"\n", 1)
	if code, body := h.Do(t, http.MethodPut, "/v1/deployments/web", []byte(stale)); code != http.StatusConflict {
		t.Fatalf("PUT with a stale resourceVersion: %d %s, want 409", code, body)
	}

	h.Restart() // kill -9, then start on the same data dir and prefix
	code, after := getMeta(t, h, "/v1/deployments/web")
	if code != http.StatusOK || after.ResourceVersion != before.ResourceVersion || after.UID != before.UID {
		t.Fatalf("after kill -9 and restart: %d %+v, want %+v", code, after, before)
	}

	// A second hub: the first one's keys, copied, and its own data dir.
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	dir2 := filepath.Join(t.TempDir(), "fleet-data")
	for _, f := range []string{store.SecretKeyFileName, pki.CACertName, pki.CAKeyName, pki.SigningKeyName, "admin.conf"} {
		copyFile(t, filepath.Join(h.DataDir, f), filepath.Join(dir2, f))
	}
	h2 := StartHub(t, HubOptions{DataDir: dir2, Args: etcdArgs(c, "/fleet/e2e/")})
	code, seen := getMeta(t, h2, "/v1/deployments/web")
	if code != http.StatusOK || seen.ResourceVersion != before.ResourceVersion {
		t.Fatalf("second hub: GET web %d %+v, want %+v", code, seen, before)
	}
	if h2.CAHash != h.CAHash {
		t.Fatalf("second hub's CA %s, first's %s: devices would not trust it", h2.CAHash, h.CAHash)
	}
	if err := h2.Stop(); err != nil {
		t.Fatal(err)
	}

	// Hubs that were not given the fleet's key files are refused.
	noCA := filepath.Join(t.TempDir(), "fleet-data")
	copyFile(t, filepath.Join(h.DataDir, store.SecretKeyFileName), filepath.Join(noCA, store.SecretKeyFileName))
	if out := runHubExpectingFailure(t, noCA, etcdArgs(c, "/fleet/e2e/")...); !strings.Contains(out, "copy ca.crt and ca.key") {
		t.Errorf("hub with its own CA: %s", out)
	}
	otherKey := filepath.Join(t.TempDir(), "fleet-data")
	for _, f := range []string{pki.CACertName, pki.CAKeyName, pki.SigningKeyName} {
		copyFile(t, filepath.Join(h.DataDir, f), filepath.Join(otherKey, f))
	}
	if err := os.WriteFile(filepath.Join(otherKey, store.SecretKeyFileName), []byte("b3RoZXIta2V5LW9mLWEtc2Vjb25kLWh1Yi0tLS0tLS0=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := runHubExpectingFailure(t, otherKey, etcdArgs(c, "/fleet/e2e/")...); !strings.Contains(out, "every hub of a fleet needs the same one") {
		t.Errorf("hub with another secrets.key: %s", out)
	}
	// Nothing the refused hubs did changed what the fleet's hub serves.
	h.Restart()
	if code, again := getMeta(t, h, "/v1/deployments/web"); code != http.StatusOK || again.ResourceVersion != before.ResourceVersion {
		t.Fatalf("after the refused hubs: %d %+v, want %+v", code, again, before)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// runHubExpectingFailure runs the hub (serving) on dataDir with args and
// returns its output; it must exit non-zero within a minute.
func runHubExpectingFailure(t *testing.T, dataDir string, args ...string) string {
	t.Helper()
	return runHubFails(t, dataDir+".home", append([]string{"--data-dir", dataDir, "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0",
		"--https-addr", "127.0.0.1:0", "--mqtts-addr", "127.0.0.1:0"}, args...)...)
}

// runHubFails runs fleet-hub with args; it must exit non-zero within a
// minute. It returns the output.
func runHubFails(t *testing.T, home string, args ...string) string {
	t.Helper()
	bin, err := BuildBinary("fleet-hub")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = cleanEnv(home)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("fleet-hub %v still ran after a minute:\n%s", args, out)
	}
	if err == nil {
		t.Fatalf("fleet-hub %v exited 0:\n%s", args, out)
	}
	t.Logf("fleet-hub exited after %v: %v", time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(out)))
	return string(out)
}

// TestE2EEtcdStoreBadInput: fleet-hub exits with a clear error for a bad
// --store, an unreachable cluster, and a prefix holding another fleet.
func TestE2EEtcdStoreBadInput(t *testing.T) {
	if out := runHubExpectingFailure(t, t.TempDir(), "--store", "etcd:/h1"); !strings.Contains(out, "--store") {
		t.Errorf("bad --store: %s", out)
	}
	empty := filepath.Join(t.TempDir(), "fleet-data")
	if out := runHubExpectingFailure(t, empty, "--store", "etcd://127.0.0.1:1"); !strings.Contains(out, "no quorum reachable") || !strings.Contains(out, "127.0.0.1:1") {
		t.Errorf("unreachable etcd: %s", out)
	}
	if entries, err := os.ReadDir(empty); err != nil || len(entries) != 0 {
		t.Errorf("a hub that found no etcd quorum left %v in its data dir (%v)", entries, err)
	}
	c := etcdtest.Start(t, etcdtest.Options{TLS: true})
	a := StartHub(t, HubOptions{Args: etcdArgs(c, "/fleet/a/")})
	b := StartHub(t, HubOptions{Args: etcdArgs(c, "/fleet/b/")})
	if err := errors.Join(a.Stop(), b.Stop()); err != nil {
		t.Fatal(err)
	}
	if out := runHubExpectingFailure(t, a.DataDir, etcdArgs(c, "/fleet/b/")...); !strings.Contains(out, "belongs to fleet") || !strings.Contains(out, "/fleet/b/") {
		t.Errorf("hub of fleet a on fleet b's prefix: %s", out)
	}
}

// runHub runs a fleet-hub command to its end and returns its output; it
// must succeed.
func runHub(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := BuildBinary("fleet-hub")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = cleanEnv(t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fleet-hub %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestE2EEtcdMigrate: fleet-hub migrate moves a hub's store from Badger to
// etcd and back; the hubs on each copy serve the same objects, with the
// same resourceVersions, uids and generations (tokens, Secrets and the
// audit trail: TestMigrateRoundTrip in hub/store/storetest).
func TestE2EEtcdMigrate(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{TLS: true})
	h := StartHub(t, HubOptions{})
	if code, body := h.Do(t, http.MethodPost, "/v1/apply", []byte(webYAML("web", "nginx:1", map[string]string{"site": "a"})+"---\n"+deviceYAML("pi-1", map[string]string{"site": "a"}))); code != http.StatusOK {
		t.Fatalf("apply: %d %s", code, body)
	}
	code, body := h.Do(t, http.MethodPost, "/v1/devices/pi-1/token", nil)
	if code != http.StatusOK && code != http.StatusCreated {
		t.Fatalf("issue token: %d %s", code, body)
	}
	want := map[string]schema.ObjectMeta{}
	for _, p := range []string{"/v1/deployments/web", "/v1/devices/pi-1"} {
		_, want[p] = getMeta(t, h, p)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	check := func(what string, h *Hub) {
		t.Helper()
		for p, w := range want {
			code, got := getMeta(t, h, p)
			if code != http.StatusOK || got.ResourceVersion != w.ResourceVersion || got.UID != w.UID || got.Generation != w.Generation {
				t.Fatalf("%s: GET %s: %d %+v, want %+v", what, p, code, got, w)
			}
		}
	}

	ca, crt, key := c.CertFiles()
	tlsFlags := []string{"--etcd-prefix", "/fleet/migrated/", "--etcd-cacert", ca, "--etcd-cert", crt, "--etcd-key", key}
	etcdURL := "etcd://" + strings.Join(c.HostPorts(), ",")
	out := runHub(t, append([]string{"migrate", "--from", "badger:" + h.DataDir, "--to", etcdURL}, tlsFlags...)...)
	t.Logf("%s", out)
	if !strings.Contains(out, "copy checked") {
		t.Fatalf("migrate output: %s", out)
	}
	onEtcd := StartHub(t, HubOptions{DataDir: h.DataDir, Args: etcdArgs(c, "/fleet/migrated/")})
	check("on etcd", onEtcd)
	if err := onEtcd.Stop(); err != nil {
		t.Fatal(err)
	}
	if out := runHubFails(t, t.TempDir(), append([]string{"migrate", "--from", "badger:" + h.DataDir, "--to", etcdURL}, tlsFlags...)...); !strings.Contains(out, "not empty") {
		t.Errorf("migrate into a used prefix: %s", out)
	}

	back := filepath.Join(t.TempDir(), "fleet-data")
	out = runHub(t, append([]string{"migrate", "--from", etcdURL, "--to", "badger:" + back}, tlsFlags...)...)
	if !strings.Contains(out, "copy checked") {
		t.Fatalf("migrate back: %s", out)
	}
	for _, f := range []string{store.SecretKeyFileName, pki.CACertName, pki.CAKeyName, pki.SigningKeyName, "admin.conf"} {
		copyFile(t, filepath.Join(h.DataDir, f), filepath.Join(back, f))
	}
	onBadger := StartHub(t, HubOptions{DataDir: back})
	check("back on badger", onBadger)
}

// TestE2EEtcdApplyLatency measures (and reports, never asserts) the
// latency of `POST /v1/apply` changing a Deployment on a real hub with
// its store on Badger and on a real 3-member etcd cluster over TLS.
func TestE2EEtcdApplyLatency(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{TLS: true})
	const n = 300
	for _, tc := range []struct {
		name string
		args []string
	}{{"badger", nil}, {"etcd", etcdArgs(c, "/fleet/latency/")}} {
		h := StartHub(t, HubOptions{Args: tc.args})
		lat := make([]time.Duration, 0, n)
		for i := range n {
			body := []byte(webYAML(fmt.Sprintf("web-%d", i%10), fmt.Sprintf("nginx:%d", i), map[string]string{"site": "a"}))
			start := time.Now()
			code, out := h.Do(t, http.MethodPost, "/v1/apply", body)
			lat = append(lat, time.Since(start))
			if code != http.StatusOK {
				t.Fatalf("%s: apply %d: %d %s", tc.name, i, code, out)
			}
		}
		slices.Sort(lat)
		t.Logf("%s: POST /v1/apply ×%d: p50 %v, p99 %v, max %v", tc.name, n,
			lat[n/2].Round(10*time.Microsecond), lat[n*99/100].Round(10*time.Microsecond), lat[n-1].Round(10*time.Microsecond))
		if err := h.Stop(); err != nil {
			t.Fatal(err)
		}
	}
}
