package test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

// backupPassphrase is the e2e backups' passphrase.
const backupPassphrase = "e2e backup passphrase, not a secret"

// fleetHub runs the fleet-hub binary with args (and the backup
// passphrase in its environment) and returns stdout, stderr and the exit
// error.
func fleetHub(t testing.TB, env []string, args ...string) (string, string, error) {
	t.Helper()
	bin, err := BuildBinary("fleet-hub")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(cleanEnv(t.TempDir()), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

var passEnv = []string{"FLEET_BACKUP_PASSPHRASE=" + backupPassphrase}

// inspectBackup runs fleet-hub backup inspect -o json.
func inspectBackup(t testing.TB, file string) backupManifest {
	t.Helper()
	out, errOut, err := fleetHub(t, passEnv, "backup", "inspect", file, "-o", "json")
	if err != nil {
		t.Fatalf("fleet-hub backup inspect: %v\n%s%s", err, out, errOut)
	}
	var m backupManifest
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("inspect -o json: %v\n%s", err, out)
	}
	return m
}

// backupManifest is what inspect -o json prints (hub/backup.Manifest).
type backupManifest struct {
	Created  time.Time      `json:"created"`
	Revision uint64         `json:"revision"`
	Objects  map[string]int `json:"objects"`
	Hub      struct {
		StoreID      string `json:"storeID"`
		CAHash       string `json:"caHash"`
		SigningKeyID string `json:"signingKeyID"`
	} `json:"hub"`
	Parts []struct {
		Name string `json:"name"`
	} `json:"parts"`
}

// applyLoad applies ConfigMaps at about perSecond through the API until
// stop is closed, recording every write's resourceVersion and latency.
type applyLoad struct {
	mu      sync.Mutex
	writes  []loadWrite
	errs    []error
	stopped chan struct{}
}

type loadWrite struct {
	name     string
	rv       uint64
	at, done time.Time
}

func startApplyLoad(t *testing.T, cl *client.Client, perSecond int, stop <-chan struct{}) *applyLoad {
	l := &applyLoad{stopped: make(chan struct{})}
	go func() {
		defer close(l.stopped)
		tick := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			name := fmt.Sprintf("load-%02d", i%40)
			manifest := fmt.Sprintf("apiVersion: fleet/v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  n: %q\n", name, strconv.Itoa(i))
			start := time.Now()
			res, err := cl.Apply(context.Background(), []byte(manifest), false)
			done := time.Now()
			if err == nil && len(res.Results) == 1 {
				var o struct{ Metadata schema.ObjectMeta }
				if err = json.Unmarshal(res.Results[0].Object, &o); err == nil {
					rv, _ := strconv.ParseUint(o.Metadata.ResourceVersion, 10, 64)
					l.mu.Lock()
					l.writes = append(l.writes, loadWrite{name, rv, start, done})
					l.mu.Unlock()
					continue
				}
			}
			l.mu.Lock()
			l.errs = append(l.errs, fmt.Errorf("apply %s: %v", name, err))
			l.mu.Unlock()
		}
	}()
	return l
}

// p99 is the 99th percentile of the latencies of the writes that started
// within [from, to).
func (l *applyLoad) p99(from, to time.Time) (time.Duration, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ds []time.Duration
	for _, w := range l.writes {
		if !w.at.Before(from) && w.at.Before(to) {
			ds = append(ds, w.done.Sub(w.at))
		}
	}
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return ds[int(math.Ceil(0.99*float64(len(ds))))-1], len(ds)
}

// TestE2EBackupRestore: a hub with three real agents on containerd and a
// Staged deployment mid-rollout; an online backup through the running
// hub's API while ~20 applies a second run; more changes after it; the
// hub killed and its data directory deleted; restore onto a new directory
// and new ports. The agents are never restarted: their broker address is
// a proxy (standing for a DNS name) moved to the new hub. They accept the
// restored hub's states with their old tokens and pins, converge (the
// deployment applied after the backup is lost, as restore says), and a
// new apply reaches them; no generation is refused as a replay, every
// device's generation keeps growing, and no container that stayed
// desired was restarted. The restored store holds exactly the writes up
// to the backup's revision.
func TestE2EBackupRestore(t *testing.T) {
	f := StartFleet(t, FleetOptions{Agents: 3, Proxy: true, Labels: e2eLabels})
	const name = "e2e-web"
	stagedMidRollout(t, f, name)
	file, m, want := backupUnderLoad(t, f)
	before := changeAfterBackup(t, f)

	// The machine dies.
	f.KillHub(t)
	if err := os.RemoveAll(f.Hub.DataDir); err != nil {
		t.Fatal(err)
	}
	started := restoreOnNewMachine(t, f, file, m)
	checkRestoredObjects(t, f, m, want)
	checkConvergedAfterRestore(t, f, name, before, started)

	// A new apply reaches every device, and none refused a replay.
	f.applyDeps(t, e2eDep{Name: "e2e-after", Args: []string{"echo", "after", "sleep", "forever"}})
	f.AwaitRollout(t, "e2e-after", len(f.Devices()), e2eConverge)
	for _, d := range f.Devices() {
		f.AwaitContainerRunning(t, d, "e2e-after", f.PodHash(t, "e2e-after"))
	}
	checkNoReplay(t, f)
}

// stagedMidRollout rolls v1 of a Staged deployment out and v2 to its
// first device, where it pauses for an hour.
func stagedMidRollout(t *testing.T, f *Fleet, name string) {
	devs := f.Devices()
	v1 := e2eDep{Name: name, Strategy: stagedStrategy("0s")}
	f.applyDeps(t, v1)
	awaitStaged(t, f, name, "v1 complete", func(r *schema.RolloutStatus) bool {
		return r.Phase == schema.RolloutComplete && r.Ready == len(devs)
	})
	v2 := v1
	v2.Env = map[string]string{"VERSION": "2"}
	v2.Strategy = stagedStrategy("1h")
	f.applyDeps(t, v2)
	awaitStaged(t, f, name, "v2 pausing after its first device", func(r *schema.RolloutStatus) bool {
		return r.Step == 1 && r.Ready == 1 && r.Updated == 1 && strings.Contains(r.Waiting, "pausing")
	})
	f.AwaitConverged(t, e2eConverge, devs...)
}

// backupUnderLoad takes an online backup through the running hub's API
// (fleet-hub backup) while 20 applies a second run, and returns the file,
// its manifest and, per ConfigMap, the resourceVersion of its last write
// at or below the backup's revision.
func backupUnderLoad(t *testing.T, f *Fleet) (string, backupManifest, map[string]uint64) {
	cl, err := client.New(f.Hub.URL, f.Hub.Token)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	load := startApplyLoad(t, cl, 20, stop)
	time.Sleep(3 * time.Second) // a baseline of applies (measured, not awaited)
	file := filepath.Join(t.TempDir(), "hub.age")
	backupStart := time.Now()
	out, errOut, err := fleetHub(t, passEnv, "backup", "--data-dir", f.Hub.DataDir, "--to", file, "--progress")
	backupEnd := time.Now()
	if err != nil {
		close(stop)
		t.Fatalf("fleet-hub backup: %v\n%s%s", err, out, errOut)
	}
	if !strings.Contains(out, "running hub at") || !strings.Contains(errOut, "written") {
		t.Errorf("backup output does not say it went through the running hub, with progress:\n%s\n%s", out, errOut)
	}
	time.Sleep(2 * time.Second) // applies after the backup, which it must not hold
	close(stop)
	<-load.stopped
	if len(load.errs) > 0 {
		t.Fatalf("applies failed during the backup: %v", load.errs)
	}
	fi, _ := os.Stat(file)
	base, nBase := load.p99(backupStart.Add(-3*time.Second), backupStart)
	during, nDuring := load.p99(backupStart, backupEnd)
	t.Logf("MEASURED online backup: %v, %d bytes; apply p99 %v (%d applies) before, %v (%d applies) during", backupEnd.Sub(backupStart).Round(time.Millisecond), fi.Size(), base, nBase, during, nDuring)
	m := inspectBackup(t, file)
	if m.Revision == 0 || m.Hub.StoreID == "" || m.Hub.CAHash == "" || m.Hub.SigningKeyID == "" || m.Objects["devices"] != 3 {
		t.Fatalf("inspect: %+v", m)
	}
	load.mu.Lock()
	defer load.mu.Unlock()
	want := map[string]uint64{}
	var above int
	for _, w := range load.writes {
		if w.rv <= m.Revision && w.rv > want[w.name] {
			want[w.name] = w.rv
		}
		if w.rv > m.Revision {
			above++
		}
	}
	if above == 0 {
		t.Fatalf("no apply landed after the backup's revision %d: the consistency check would prove nothing", m.Revision)
	}
	return file, m, want
}

// fleetBefore is what the fleet ran when the hub died.
type fleetBefore struct {
	gens       map[string]int64     // observed generation per device
	agentPIDs  map[string]int       // agent process per device
	containers map[string]Container // "device/ID" → container
}

// changeAfterBackup applies a deployment the backup does not hold, which
// gives every device a newer generation, and records what runs.
func changeAfterBackup(t *testing.T, f *Fleet) fleetBefore {
	devs := f.Devices()
	f.applyDeps(t, e2eDep{Name: "e2e-lost", Args: []string{"echo", "lost", "sleep", "forever"}})
	f.AwaitRollout(t, "e2e-lost", len(devs), e2eConverge)
	f.AwaitConverged(t, e2eConverge, devs...)
	b := fleetBefore{gens: map[string]int64{}, agentPIDs: map[string]int{}, containers: map[string]Container{}}
	for _, d := range devs {
		b.gens[d] = f.Device(t, d).Status.ObservedGeneration
		b.agentPIDs[d] = f.Agent(t, d).PID()
		for _, c := range f.Containers(t, d) {
			b.containers[d+"/"+c.ID] = c
		}
	}
	return b
}

// restoreOnNewMachine restores the backup into a new directory, starts a
// hub on it on new ports and moves the agents' broker address (their
// proxies) to it; it returns when that hub started.
func restoreOnNewMachine(t *testing.T, f *Fleet, file string, m backupManifest) time.Time {
	newDir := filepath.Join(t.TempDir(), "restored", "fleet-data")
	restoreStart := time.Now()
	out, errOut, err := fleetHub(t, passEnv, "restore", "--from", file, "--data-dir", newDir)
	if err != nil {
		t.Fatalf("fleet-hub restore: %v\n%s%s", err, out, errOut)
	}
	t.Logf("MEASURED restore: %v", time.Since(restoreStart).Round(time.Millisecond))
	for _, s := range []string{"revision " + strconv.FormatUint(m.Revision, 10), "ago", "is lost", m.Hub.StoreID} {
		if !strings.Contains(out, s) {
			t.Errorf("restore output does not say %q:\n%s", s, out)
		}
	}
	hubStart := time.Now()
	restored := StartHub(t, HubOptions{DataDir: newDir})
	if restored.SigningKey != f.Hub.SigningKey || restored.CAHash != f.Hub.CAHash {
		t.Fatalf("the restored hub has another signing key or CA: %s %s, was %s %s", restored.SigningKey, restored.CAHash, f.Hub.SigningKey, f.Hub.CAHash)
	}
	f.Hub = restored
	if !strings.Contains(restored.Logs(), "devices_held=3") {
		t.Errorf("the restored hub does not say it holds the 3 devices until they report:\n%s", grepLines(restored.Logs(), "restored"))
	}
	for _, a := range f.Agents {
		a.Proxy.Retarget(restored.MQTTAddr)
	}
	return hubStart
}

// checkRestoredObjects: the restored store holds exactly the backup's
// revision: every write at or below it, at its resourceVersion; none
// above; and not the deployment applied after the backup.
func checkRestoredObjects(t *testing.T, f *Fleet, m backupManifest, want map[string]uint64) {
	var cms schema.ConfigMapList
	f.Get(t, "/v1/configmaps", &cms)
	have := map[string]uint64{}
	for _, c := range cms.Items {
		rv, _ := strconv.ParseUint(c.Metadata.ResourceVersion, 10, 64)
		have[c.Metadata.Name] = rv
	}
	if fmt.Sprint(have) != fmt.Sprint(want) {
		t.Errorf("restored ConfigMaps (name:resourceVersion)\n%v\nwant every write at or below revision %d\n%v", have, m.Revision, want)
	}
	if code, _, _ := f.Request(t.Context(), http.MethodGet, "/v1/deployments/e2e-lost", nil); code != http.StatusNotFound {
		t.Errorf("the deployment applied after the backup: %d, want 404 (lost)", code)
	}
}

// checkConvergedAfterRestore: the agents, never restarted, come back on
// their own and converge above the generation they ran; the lost
// deployment's containers go, every other keeps its task; the rollout is
// where it was.
func checkConvergedAfterRestore(t *testing.T, f *Fleet, name string, b fleetBefore, hubStart time.Time) {
	devs := f.Devices()
	f.AwaitDevices(t, e2eConverge, "converged above the generation run before the restore", func(d schema.Device) bool {
		return d.Status != nil && d.Status.Online && Converged(d) && d.Status.ObservedGeneration > b.gens[d.Metadata.Name]
	}, devs...)
	t.Logf("MEASURED restored hub start to %d agents converged: %v", len(devs), time.Since(hubStart).Round(time.Millisecond))
	for _, d := range devs {
		f.AwaitNoContainer(t, d, "e2e-lost")
		if got := f.Agent(t, d).PID(); got != b.agentPIDs[d] {
			t.Errorf("%s: agent restarted (pid %d, was %d)", d, got, b.agentPIDs[d])
		}
	}
	awaitStaged(t, f, name, "the rollout still pausing after the restore", func(r *schema.RolloutStatus) bool {
		return r.Step == 1 && r.Ready == 1 && strings.Contains(r.Waiting, "pausing")
	})
	for key, c := range b.containers {
		if c.Pod == "e2e-lost" || c.PID == 0 {
			continue
		}
		d, _, _ := strings.Cut(key, "/")
		now := f.Containers(t, d)
		i := slices.IndexFunc(now, func(n Container) bool { return n.ID == c.ID })
		if i < 0 || now[i].PID != c.PID {
			t.Errorf("%s: container %s (pod %s) was restarted or removed across the restore: %+v", d, c.ID, c.Pod, now)
		}
	}
}

// checkNoReplay: no agent refused a state as a replay (logs and events).
func checkNoReplay(t *testing.T, f *Fleet) {
	for _, d := range f.Devices() {
		if logs := f.Agent(t, d).Logs(); strings.Contains(logs, "replayed desired state") {
			t.Errorf("%s refused a replayed desired state:\n%s", d, grepLines(logs, "replayed"))
		}
		var evs schema.EventList
		f.Get(t, "/v1/devices/"+d+"/events", &evs)
		for _, e := range evs.Items {
			if e.Reason == "DesiredStateReplayed" {
				t.Errorf("%s: %+v", d, e)
			}
		}
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// dirDigest hashes every file under dir (names, modes and contents).
func dirDigest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %v\n", path, info.Mode())
		if d.Type().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestE2EBackupBadInput: a backup file with one flipped byte, a wrong
// passphrase, a file that is no backup, a backup of another hub restored
// over that hub's data directory, and a restore into a non-empty
// directory: each is refused with a clear error and a non-zero exit, and
// nothing is written or overwritten. A backup without a key, and one
// asked of the API without the admin token, are refused too.
func TestE2EBackupBadInput(t *testing.T) {
	a := StartHub(t, HubOptions{})
	b := StartHub(t, HubOptions{})
	dir := t.TempDir()
	file := filepath.Join(dir, "a.age")
	if out, errOut, err := fleetHub(t, passEnv, "backup", "--data-dir", a.DataDir, "--to", file); err != nil {
		t.Fatalf("backup: %v\n%s%s", err, out, errOut)
	}
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x10
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	nonEmpty := filepath.Join(dir, "non-empty")
	if err := os.MkdirAll(nonEmpty, 0o700); err != nil {
		t.Fatal(err)
	}
	write("non-empty/notes.txt", []byte("keep me"))
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	bBefore := dirDigest(t, b.DataDir)

	for _, tc := range []struct {
		name, file, into string
		env              []string
		want             string
	}{
		{"one flipped byte", write("flipped.age", flipped), "", passEnv, "damaged"},
		{"wrong passphrase", file, "", []string{"FLEET_BACKUP_PASSPHRASE=not the passphrase at all"}, "wrong passphrase"},
		{"not a backup", write("notes.age", []byte("these are my notes, not a backup\n")), "", passEnv, "not a Fleet backup"},
		{"cut short", write("short.age", good[:len(good)-64]), "", passEnv, "damaged"},
		{"another hub's data dir", file, b.DataDir, passEnv, "holds a hub's data"},
		{"non-empty dir", file, nonEmpty, passEnv, "is not empty"},
		{"no key", file, "", nil, "no key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			into := tc.into
			if into == "" {
				into = filepath.Join(t.TempDir(), "fleet-data")
			}
			out, errOut, err := fleetHub(t, tc.env, "restore", "--from", tc.file, "--data-dir", into)
			if err == nil {
				t.Fatalf("restore succeeded:\n%s", out)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr does not say %q:\n%s", tc.want, errOut)
			}
			if tc.into == "" {
				if _, err := os.Stat(into); err == nil {
					t.Errorf("a refused restore created %s", into)
				}
				if left, _ := filepath.Glob(filepath.Join(filepath.Dir(into), ".*")); len(left) > 0 {
					t.Errorf("a refused restore left %v", left)
				}
			}
		})
	}
	if got := dirDigest(t, b.DataDir); got != bBefore {
		t.Error("the other hub's data directory changed")
	}
	if b, _ := os.ReadFile(filepath.Join(nonEmpty, "notes.txt")); string(b) != "keep me" {
		t.Errorf("the non-empty directory was overwritten: %q", b)
	}
	backupIdentityAndAccess(t, a, b, dir, file)
}

// backupIdentityAndAccess: a stopped hub (b) is backed up from its data
// directory; inspect names the hub a backup is of; no backup is written
// in clear, over a file, without the admin token or by a viewer; and
// fleet backup -o writes one through the API.
func backupIdentityAndAccess(t *testing.T, a, b *Hub, dir, file string) {
	offline := filepath.Join(dir, "b-offline.age")
	if out, errOut, err := fleetHub(t, passEnv, "backup", "--data-dir", b.DataDir, "--to", offline); err != nil || !strings.Contains(out, "stopped hub") {
		t.Errorf("backup of a stopped hub: %v\n%s%s", err, out, errOut)
	}
	if mb := inspectBackup(t, offline); mb.Hub.StoreID == "" || mb.Hub.SigningKeyID == "" {
		t.Errorf("backup of a stopped hub: %+v", mb)
	}
	// inspect tells which hub a backup is of.
	m := inspectBackup(t, file)
	var infoA schema.HubInfo
	_, body := a.Do(t, http.MethodGet, "/v1/info", nil)
	if err := json.Unmarshal(body, &infoA); err != nil {
		t.Fatal(err)
	}
	if m.Hub.StoreID != infoA.Store || m.Hub.CAHash != infoA.CAHash {
		t.Errorf("inspect says hub %s (CA %s); hub a is %s (CA %s)", m.Hub.StoreID, m.Hub.CAHash, infoA.Store, infoA.CAHash)
	}
	out, _, err := fleetHub(t, passEnv, "backup", "inspect", file)
	if err != nil || strings.Contains(out, "PRIVATE KEY") || !strings.Contains(out, m.Hub.StoreID) {
		t.Errorf("inspect (table): %v\n%s", err, out)
	}

	// Never in clear, never by someone without the admin token, never over
	// an existing file.
	if _, errOut, err := fleetHub(t, nil, "backup", "--data-dir", a.DataDir, "--to", filepath.Join(dir, "clear.age")); err == nil || !strings.Contains(errOut, "never written in clear") {
		t.Errorf("backup without a key: %v %s", err, errOut)
	}
	if _, errOut, err := fleetHub(t, passEnv, "backup", "--data-dir", a.DataDir, "--to", file); err == nil || !strings.Contains(errOut, "exists") {
		t.Errorf("backup over an existing file: %v %s", err, errOut)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, a.URL+"/v1/backup", strings.NewReader(`{"passphrase":"`+backupPassphrase+`"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /v1/backup without a token: %d, want 401", resp.StatusCode)
	}
	if code, body := a.Do(t, http.MethodPost, "/v1/backup", []byte(`{"passphrase":"short"}`)); code != http.StatusBadRequest || !strings.Contains(string(body), "passphrase") {
		t.Errorf("POST /v1/backup with a short passphrase: %d %s", code, body)
	}
	code, body := a.Do(t, http.MethodPost, "/v1/credentials", []byte(`{"name":"ci","role":"viewer"}`))
	var viewer schema.Credential
	if code != http.StatusCreated || json.Unmarshal(body, &viewer) != nil {
		t.Fatalf("create a viewer: %d %s", code, body)
	}
	req, _ = http.NewRequestWithContext(t.Context(), http.MethodPost, a.URL+"/v1/backup", strings.NewReader(`{"passphrase":"`+backupPassphrase+`"}`))
	req.Header.Set("Authorization", "Bearer "+viewer.Token)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST /v1/backup as a viewer: %d, want 403", resp.StatusCode)
	}

	// fleet backup -o, through the API with the admin config.
	fleetBin, err := BuildBinary("fleet")
	if err != nil {
		t.Fatal(err)
	}
	viaCLI := filepath.Join(dir, "cli.age")
	cmd := exec.CommandContext(t.Context(), fleetBin, "backup", "-o", viaCLI)
	cmd.Env = append(cleanEnv(t.TempDir()), "FLEET_CONFIG="+a.AdminConfig(), passEnv[0])
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "revision") {
		t.Fatalf("fleet backup -o: %v\n%s", err, out)
	}
	if got := inspectBackup(t, viaCLI); got.Hub.StoreID != infoA.Store {
		t.Errorf("fleet backup -o wrote a backup of %s, want %s", got.Hub.StoreID, infoA.Store)
	}
	if fi, err := os.Stat(viaCLI); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("fleet backup -o file: %v %v", fi, err)
	}
}

// TestE2EBackupScheduled: a hub with --backup-dir writes encrypted
// backups on its schedule, keeps the newest --backup-keep, reports the
// last success on /metrics; a backup directory it cannot write counts
// failures and leaves an audit entry.
func TestE2EBackupScheduled(t *testing.T) {
	backups := filepath.Join(t.TempDir(), "backups")
	h := StartHub(t, HubOptions{Args: []string{"--backup-dir", backups, "--backup-every", "1s", "--backup-keep", "2"}, Env: passEnv})
	metric := func(h *Hub, name string) float64 {
		_, body := h.Do(t, http.MethodGet, "/metrics", nil)
		for _, l := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(l, name+" "); ok {
				f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
				return f
			}
		}
		return -1
	}
	deadline := time.Now().Add(time.Minute)
	for {
		entries, _ := filepath.Glob(filepath.Join(backups, "fleet-backup-*.age"))
		if len(entries) == 2 && metric(h, "fleet_hub_backup_last_success_timestamp_seconds") > 0 {
			all, _ := os.ReadDir(backups)
			if len(all) <= 3 { // two kept, at most one being written
				break
			}
		}
		if time.Now().After(deadline) {
			all, _ := os.ReadDir(backups)
			t.Fatalf("scheduled backups: %v; metric %v", all, metric(h, "fleet_hub_backup_last_success_timestamp_seconds"))
		}
		time.Sleep(pollEvery)
	}
	entries, _ := filepath.Glob(filepath.Join(backups, "fleet-backup-*.age"))
	if m := inspectBackup(t, entries[0]); m.Revision == 0 {
		t.Errorf("scheduled backup: %+v", m)
	}
	fi, err := os.Stat(entries[0])
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("scheduled backup mode: %v %v", fi, err)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}

	// A backup directory that is a file: every backup fails.
	bad := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(bad, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h2 := StartHub(t, HubOptions{Args: []string{"--backup-dir", bad, "--backup-every", "1s"}, Env: passEnv})
	deadline = time.Now().Add(time.Minute)
	for metric(h2, "fleet_hub_backup_failures_total") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no backup failure counted:\n%s", h2.Logs())
		}
		time.Sleep(pollEvery)
	}
	_, body := h2.Do(t, http.MethodGet, "/v1/audit", nil)
	if !strings.Contains(string(body), `"action":"backup"`) {
		t.Errorf("no audit entry for the failed backup: %s", body)
	}
	// Without a key, the hub refuses to start with --backup-dir.
	if _, errOut, err := fleetHub(t, nil, "--data-dir", filepath.Join(t.TempDir(), "d"), "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0", "--https-addr", "", "--mqtts-addr", "", "--backup-dir", backups); err == nil || !strings.Contains(errOut, "never written in clear") {
		t.Errorf("hub with --backup-dir and no key: %v %s", err, errOut)
	}
}
