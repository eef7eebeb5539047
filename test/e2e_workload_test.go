package test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// TestE2EWorkloads: real edge workloads through the whole fleet (a real
// fleet-hub, two real fleet-agent processes, a private containerd): device
// nodes, privileges, volumes that outlive updates, agent crashes and a
// containerd restart, and (when the hub stores them) ConfigMaps and
// Secrets from `fleet apply` to the containers' env and files. dev-1 is
// role=edge, dev-2 role=other.
//
//	go test ./test -run 'TestE2EWorkloads/volumes'
func TestE2EWorkloads(t *testing.T) {
	f := StartFleet(t, FleetOptions{Agents: 2, Labels: func(i int) map[string]string {
		if i == 0 {
			return map[string]string{"role": "edge"}
		}
		return map[string]string{"role": "other"}
	}})
	for _, sc := range []e2eScenario{
		{"hardware", e2eWorkloadHardware},
		{"volumes_survive_updates_crashes_and_containerd", e2eWorkloadVolumes},
		{"configmaps_and_secrets", e2eWorkloadConfig},
	} {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, f) })
	}
}

// awaitContainerLog waits until the log of pod's container on device
// holds every want, and returns it.
func awaitContainerLog(t *testing.T, f *Fleet, device, pod, container string, want ...string) string {
	t.Helper()
	path := filepath.Join(f.Agent(t, device).StateDir, "logs", pod, container+".log")
	deadline := time.Now().Add(e2eConverge)
	for {
		b, _ := os.ReadFile(path)
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(string(b), w)
		}
		if ok {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s/%s's log does not say %q:\n%s", device, pod, container, want, b)
		}
		time.Sleep(pollEvery)
	}
}

// awaitPodReady waits until the hub reports pod ready on device at the
// deployment's current hash.
func awaitPodReady(t *testing.T, f *Fleet, device, pod string) {
	t.Helper()
	hash := f.PodHash(t, pod)
	f.AwaitDevices(t, e2eConverge, pod+" ready", func(d schema.Device) bool {
		if d.Status == nil {
			return false
		}
		for _, p := range d.Status.Pods {
			if p.Name == pod && p.Ready && p.Hash == hash {
				return true
			}
		}
		return false
	}, device)
}

func e2eMknod(t *testing.T) string {
	t.Helper()
	path := "/dev/fleet-test-" + strings.ToLower(rand.Text()[:10])
	const major, minor = 1, 3 // /dev/null's
	if err := syscall.Mknod(path, syscall.S_IFCHR|0o666, major<<8|minor); err != nil {
		t.Fatalf("mknod %s: %v", path, err)
	}
	t.Cleanup(func() { _ = os.Remove(path) })
	return path
}

func capEffOfSelf(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return ""
}

func args(a ...string) string {
	b, _ := json.Marshal(a)
	return string(b)
}

// e2eWorkloadHardware: a mapped device node (mknod'ed under /dev for the
// test) is in the container and can be read and written; a privileged
// container sees the host's device nodes and every capability;
// capabilities add and drop show in CapEff; runAsUser and runAsGroup are
// the process's; readOnlyRootFilesystem refuses a write.
func e2eWorkloadHardware(t *testing.T, f *Fleet) {
	const name = "e2e-hw"
	f.deleteOnCleanup(t, name)
	node := e2eMknod(t)
	f.Apply(t, fmt.Sprintf(`apiVersion: fleet/v1
kind: Deployment
metadata: {name: %[1]s}
spec:
  selector: {matchLabels: {role: edge}}
  template:
    spec:
      volumes: [{name: scratch, emptyDir: {}}]
      containers:
      - name: dev
        image: %[2]s
        args: %[3]s
        devices: [{hostPath: %[4]s, containerPath: /dev/sensor0, permissions: rw}]
      - name: priv
        image: %[2]s
        args: %[5]s
        securityContext: {privileged: true}
      - name: caps
        image: %[2]s
        args: [caps, sleep, forever]
        securityContext: {capabilities: {drop: [ALL], add: [NET_ADMIN, CAP_SYS_TIME]}}
      - name: user
        image: %[2]s
        args: [id, write-fail, /rootfs-file, write, /scratch/f, ok, sleep, forever]
        securityContext: {runAsUser: 1234, runAsGroup: 5678, readOnlyRootFilesystem: true}
        volumeMounts: [{name: scratch, mountPath: /scratch}]
`, name, f.Image,
		args("stat", "/dev/sensor0", "write", "/dev/sensor0", "hello", "read", "/dev/sensor0", "echo", "dev-ok", "sleep", "forever"),
		node, args("caps", "stat", node, "sleep", "forever")))
	awaitPodReady(t, f, "dev-1", name)
	awaitContainerLog(t, f, "dev-1", name, "dev", "stat /dev/sensor0: char 1:3", "wrote /dev/sensor0", "read: \n", "dev-ok")
	awaitContainerLog(t, f, "dev-1", name, "priv", "caps: CapEff="+capEffOfSelf(t), "stat "+node+": char 1:3")
	const netAdmin, sysTime = 12, 25
	awaitContainerLog(t, f, "dev-1", name, "caps", fmt.Sprintf("caps: CapEff=%016x", uint64(1)<<netAdmin|uint64(1)<<sysTime))
	awaitContainerLog(t, f, "dev-1", name, "user", "id: uid=1234 gid=5678", "write refused", "wrote /scratch/f")
	f.AwaitNoContainer(t, "dev-2", name)
}

// e2eWorkloadVolumes: a persistent volume's file survives an image
// update, an agent kill -9, a restart of containerd and a rollback; an
// emptyDir of medium Memory is a tmpfs of its sizeLimit; an update runs
// the old version's preStop hook and kills it after the pod's grace
// period, not the agent's default; the volume goes with the deployment.
func e2eWorkloadVolumes(t *testing.T, f *Fleet) {
	const name = "e2e-vol"
	f.deleteOnCleanup(t, name)
	hook := t.TempDir()
	apply := func(version string, script ...string) {
		t.Helper()
		a := append([]string{"echo", "version-" + version, "statfs", "/ram"}, script...)
		a = append(a, "write", "/data/f", "from-"+version, "echo", "wrote-"+version, "ignore-term", "sleep", "forever")
		f.Apply(t, fmt.Sprintf(`apiVersion: fleet/v1
kind: Deployment
metadata: {name: %[1]s}
spec:
  selector: {matchLabels: {role: edge}}
  template:
    spec:
      terminationGracePeriodSeconds: 2
      volumes:
      - {name: data, persistent: {}}
      - {name: ram, emptyDir: {medium: Memory, sizeLimit: 8Mi}}
      - {name: hook, hostPath: {path: %[4]s}}
      containers:
      - name: app
        image: %[2]s
        args: %[3]s
        volumeMounts:
        - {name: data, mountPath: /data, subPath: app}
        - {name: ram, mountPath: /ram}
        - {name: hook, mountPath: /hook}
        lifecycle: {preStop: {exec: {command: [/app, write, /hook/prestop, %[5]s]}}}
`, name, f.Image, args(a...), hook, "stopped-"+version))
		awaitPodReady(t, f, "dev-1", name)
	}
	apply("v1")
	awaitContainerLog(t, f, "dev-1", name, "app", "version-v1", "statfs /ram: type=0x1021994 bytes=8388608", "wrote-v1")
	stateDir := f.Agent(t, "dev-1").StateDir
	onDevice := filepath.Join(stateDir, "volumes", name, "data", "app", "f")

	start := time.Now()
	apply("v2", "read", "/data/f")
	if took := time.Since(start); took > 9*time.Second {
		t.Errorf("the update took %v: v1, which ignores SIGTERM, was not killed after its 2 s grace period", took)
	}
	awaitContainerLog(t, f, "dev-1", name, "app", "read: from-v1", "wrote-v2")
	if b, _ := os.ReadFile(filepath.Join(hook, "prestop")); string(b) != "stopped-v1" {
		t.Errorf("v1's preStop hook wrote %q", b)
	}

	// kill -9 of the agent, then a restart of containerd under it.
	v2 := f.AwaitContainerRunning(t, "dev-1", name)
	f.KillAgent(t, "dev-1")
	f.Agent(t, "dev-1").Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.Containerd.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	f.AwaitConverged(t, e2eConverge, "dev-1")
	if c := f.AwaitContainerRunning(t, "dev-1", name); c.PID != v2.PID {
		t.Errorf("the agent crash and the containerd restart restarted the pod: pid %d -> %d", v2.PID, c.PID)
	}
	if b, err := os.ReadFile(onDevice); err != nil || string(b) != "from-v2" {
		t.Fatalf("persistent file after kill -9 and the containerd restart: %q %v", b, err)
	}

	apply("v3", "read", "/data/f")
	awaitContainerLog(t, f, "dev-1", name, "app", "read: from-v2", "wrote-v3")

	// A rollback (to v2's template) finds v3's file.
	if out := f.CLI(t, "rollout", "undo", "deployment/"+name); !strings.Contains(out, "rolled back") {
		t.Fatalf("fleet rollout undo: %q", out)
	}
	awaitPodReady(t, f, "dev-1", name)
	awaitContainerLog(t, f, "dev-1", name, "app", "read: from-v3")

	// The deployment goes: so does its persistent volume.
	if _, errOut, err := f.RunCLI(t, "", "delete", "deployment", name); err != nil {
		t.Fatalf("delete: %v %s", err, errOut)
	}
	f.AwaitNoContainer(t, "dev-1", name)
	deadline := time.Now().Add(e2eConverge)
	for {
		if _, err := os.Stat(filepath.Join(stateDir, "volumes", name)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the persistent volume of the deleted deployment is still on the device")
		}
		time.Sleep(pollEvery)
	}
}

// e2eWorkloadConfig: `fleet apply` of a Secret and a ConfigMap reaches
// the containers of the device whose pod uses them, as env and as files;
// a ConfigMap update changes the file in place there (same process) and
// does not touch the device that does not use it; the secret value shows
// in no `fleet` output and in no agent's log.
func e2eWorkloadConfig(t *testing.T, f *Fleet) {
	const secretValue = "e2e-s3cret-v4lue-do-not-print"
	f.deleteOnCleanup(t, "e2e-cfg", "e2e-plain")
	t.Cleanup(func() {
		for _, o := range []string{"secret/e2e-creds", "configmap/e2e-config"} {
			_, _, _ = f.RunCLI(t, "", "delete", o, "--ignore-not-found")
		}
	})
	cm := func(level string) string {
		return fmt.Sprintf(`apiVersion: fleet/v1
kind: ConfigMap
metadata: {name: e2e-config}
data: {level: %[1]s, app.ini: "level=%[1]s"}
`, level)
	}
	out, errOut, err := f.RunCLI(t, `apiVersion: fleet/v1
kind: Secret
metadata: {name: e2e-creds}
stringData: {password: `+secretValue+`}
---
`+cm("debug"), "apply", "-f", "-")
	if err != nil {
		t.Fatalf("apply a Secret and a ConfigMap: %v %s", err, errOut)
	}
	if strings.Contains(out+errOut, secretValue) {
		t.Errorf("fleet apply printed the secret value: %s%s", out, errOut)
	}
	f.Apply(t, fmt.Sprintf(`apiVersion: fleet/v1
kind: Deployment
metadata: {name: e2e-cfg}
spec:
  selector: {matchLabels: {role: edge}}
  template:
    spec:
      volumes:
      - {name: config, configMap: {name: e2e-config}}
      - {name: creds, secret: {secretName: e2e-creds}}
      containers:
      - name: app
        image: %[1]s
        args: [env, LEVEL, env, PASSWORD, read, /creds/password, watch, /config/app.ini]
        env:
        - {name: LEVEL, valueFrom: {configMapKeyRef: {name: e2e-config, key: level}}}
        - {name: PASSWORD, valueFrom: {secretKeyRef: {name: e2e-creds, key: password}}}
        volumeMounts:
        - {name: config, mountPath: /config}
        - {name: creds, mountPath: /creds}
---
apiVersion: fleet/v1
kind: Deployment
metadata: {name: e2e-plain}
spec:
  selector: {matchLabels: {role: other}}
  template:
    spec:
      containers: [{name: app, image: %[1]s, args: [sleep, forever]}]
`, f.Image))
	awaitPodReady(t, f, "dev-1", "e2e-cfg")
	awaitPodReady(t, f, "dev-2", "e2e-plain")
	awaitContainerLog(t, f, "dev-1", "e2e-cfg", "app", "LEVEL=debug", "PASSWORD="+secretValue, "read: "+secretValue, "watch: level=debug")
	before := f.AwaitContainerRunning(t, "dev-1", "e2e-cfg")
	other := f.AwaitContainerRunning(t, "dev-2", "e2e-plain")
	otherGen := f.Device(t, "dev-2").Status.ObservedGeneration

	// The ConfigMap changes: the file changes in place on dev-1 …
	f.Apply(t, cm("trace"))
	awaitContainerLog(t, f, "dev-1", "e2e-cfg", "app", "watch: level=trace")
	// … where the env that came from it makes the container start again,
	// with the same ID.
	after := f.AwaitContainers(t, "dev-1", e2eConverge, "e2e-cfg restarted with the new env", func(cs []Container) bool {
		for _, c := range cs {
			if c.Pod == "e2e-cfg" {
				return c.ID == before.ID && c.PID != 0 && c.PID != before.PID
			}
		}
		return false
	})
	_ = after
	awaitContainerLog(t, f, "dev-1", "e2e-cfg", "app", "LEVEL=trace")
	f.AwaitConverged(t, e2eConverge, "dev-1", "dev-2")
	if c := f.AwaitContainerRunning(t, "dev-2", "e2e-plain"); c.PID != other.PID {
		t.Errorf("dev-2, which does not use the ConfigMap, restarted its pod")
	}
	if g := f.Device(t, "dev-2").Status.ObservedGeneration; g != otherGen {
		t.Errorf("dev-2's desired state changed (generation %d -> %d) for a ConfigMap it does not use", otherGen, g)
	}

	// The value is in no CLI output and no agent log.
	for _, a := range [][]string{
		{"get", "secret", "e2e-creds", "-o", "yaml"}, {"get", "secrets"}, {"describe", "secret", "e2e-creds"},
		{"get", "deployment", "e2e-cfg", "-o", "json"}, {"describe", "device", "dev-1"}, {"get", "pods", "-o", "wide"},
	} {
		out, errOut, _ := f.RunCLI(t, "", a...)
		if strings.Contains(out+errOut, secretValue) {
			t.Errorf("fleet %s prints the secret value", strings.Join(a, " "))
		}
	}
	for _, d := range f.Devices() {
		if strings.Contains(f.Agent(t, d).Logs(), secretValue) {
			t.Errorf("%s's agent logged the secret value", d)
		}
	}
	if strings.Contains(f.Hub.Logs(), secretValue) {
		t.Error("the hub logged the secret value")
	}
}
