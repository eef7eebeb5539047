package state

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

func desiredState(gen int64) *schema.DesiredState {
	return &schema.DesiredState{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState},
		Device:   "dev1", Generation: gen, Store: "s1",
		Pods: []schema.Pod{{Name: "web", Spec: schema.PodSpec{Containers: []schema.Container{{Name: "c", Image: "nginx"}}}}},
	}
}

func desiredPayload(t *testing.T, gen int64) []byte {
	t.Helper()
	b, err := json.Marshal(desiredState(gen))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDesiredRoundTrip(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if ds, err := d.LoadDesired(); ds != nil || err != nil {
		t.Fatalf("empty dir: %v %v", ds, err)
	}
	for gen := int64(1); gen <= 3; gen++ {
		if err := d.SaveDesiredPayload(desiredPayload(t, gen)); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := d.LoadDesired()
	if err != nil || ds.Generation != 3 || ds.Pods[0].Spec.Containers[0].Image != "nginx" {
		t.Fatalf("load = %+v, %v", ds, err)
	}
	entries, _ := os.ReadDir(filepath.Join(d.Root(), "v1"))
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
		if info, _ := e.Info(); info.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %s, want 0600", e.Name(), info.Mode().Perm())
		}
	}
}

// TestDesiredPayloadRoundTrip: a payload saved as received (no defaults,
// a field this agent does not know) loads defaulted, and the file holds
// exactly the bytes saved.
func TestDesiredPayloadRoundTrip(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(`{"apiVersion":"fleet/v1","kind":"DesiredState","device":"dev1","generation":7,"store":"s1","fromANewerHub":true,` +
		`"pods":[{"name":"web","spec":{"containers":[{"name":"c","image":"nginx"}]}}]}`)
	if err := d.SaveDesiredPayload(payload); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(d.Root(), "v1", "desired.json")); string(b) != string(payload) {
		t.Fatalf("file holds %s", b)
	}
	ds, err := d.LoadDesired()
	if err != nil {
		t.Fatal(err)
	}
	spec := ds.Pods[0].Spec
	if ds.Generation != 7 || spec.RestartPolicy != schema.RestartAlways || spec.HostNetwork == nil || !*spec.HostNetwork ||
		spec.Containers[0].ImagePullPolicy != schema.PullIfNotPresent {
		t.Fatalf("loaded %+v, want generation 7 with defaults", ds)
	}
}

func TestAgentRoundTrip(t *testing.T) {
	d, _ := Open(t.TempDir())
	a, err := d.LoadAgent()
	if err != nil || a.Containers == nil {
		t.Fatalf("empty: %+v %v", a, err)
	}
	at := time.Date(2025, 1, 1, 0, 0, 0, 123, time.UTC)
	k := Key{Pod: "web", Container: "c", Hash: "abc"}
	steady := &Revision{Pod: schema.Pod{Name: "web", Hash: "abc", Spec: schema.PodSpec{Containers: []schema.Container{{Name: "c", Image: "app:1"}}}}, Since: at}
	a = Agent{
		Store: "s1", AppliedGeneration: 4,
		Containers: History{k: {Restarts: 3, Delay: 20 * time.Second, NotBefore: at, LastExitAt: at, ExitSeen: true, FailedStarts: 2}},
		Rollouts:   Rollouts{"web": {Steady: steady, Failed: &Failure{Hash: "def", Container: "c", Reason: "CrashLoopBackOff", ExitCode: 1, Attempts: 3, At: at}}},
	}
	if err := d.SaveAgent(a); err != nil {
		t.Fatal(err)
	}
	got, err := d.LoadAgent()
	if err != nil {
		t.Fatal(err)
	}
	r := got.Containers[k]
	if got.AppliedGeneration != 4 || got.Store != "s1" || r.Restarts != 3 || r.Delay != 20*time.Second || !r.NotBefore.Equal(at) || !r.LastExitAt.Equal(at) || r.FailedStarts != 2 {
		t.Fatalf("round trip = %+v", got)
	}
	ro := got.Rollouts["web"]
	if ro.Steady == nil || ro.Steady.Pod.Hash != "abc" || ro.Steady.Pod.Spec.Containers[0].Image != "app:1" || !ro.Steady.Since.Equal(at) ||
		ro.Previous != nil || ro.Failed == nil || *ro.Failed != *a.Rollouts["web"].Failed {
		t.Fatalf("rollout round trip = %+v", ro)
	}
}

// TestSaveAgentSkipsUnchanged: saving what was last written replaces
// nothing (the reconciler saves after every pass); a change is written.
func TestSaveAgentSkipsUnchanged(t *testing.T) {
	d, _ := Open(t.TempDir())
	p := filepath.Join(d.Root(), "v1", agentFile)
	inode := func() uint64 {
		t.Helper()
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return info.Sys().(*syscall.Stat_t).Ino
	}
	a := Agent{Store: "s1", AppliedGeneration: 1, Containers: History{}}
	if err := d.SaveAgent(a); err != nil {
		t.Fatal(err)
	}
	first := inode()
	if err := d.SaveAgent(a); err != nil {
		t.Fatal(err)
	}
	if inode() != first {
		t.Error("an unchanged agent state was written again")
	}
	a.AppliedGeneration = 2
	if err := d.SaveAgent(a); err != nil {
		t.Fatal(err)
	}
	if inode() == first {
		t.Error("a changed agent state was not written")
	}
	if got, err := d.LoadAgent(); err != nil || got.AppliedGeneration != 2 {
		t.Fatalf("load = %+v, %v", got, err)
	}
}

// TestSaveBothFiles: one Save writes the desired payload and the agent
// state; a payload already saved, or an agent state already written, is
// not written again; a failed save leaves the files as they were and is
// tried again by the next.
func TestSaveBothFiles(t *testing.T) {
	d, _ := Open(t.TempDir())
	inode := func(name string) uint64 {
		t.Helper()
		info, err := os.Stat(filepath.Join(d.Root(), "v1", name))
		if err != nil {
			t.Fatal(err)
		}
		return info.Sys().(*syscall.Stat_t).Ino
	}
	p1 := desiredPayload(t, 1)
	a := Agent{Store: "s1", AppliedGeneration: 0, Containers: History{}}
	if err := d.Save(p1, &a); err != nil {
		t.Fatal(err)
	}
	if ds, err := d.LoadDesired(); err != nil || ds.Generation != 1 {
		t.Fatalf("desired = %+v, %v", ds, err)
	}
	if got, err := d.LoadAgent(); err != nil || got.Store != "s1" || got.Version != LayoutVersion {
		t.Fatalf("agent = %+v, %v", got, err)
	}
	desiredIno, agentIno := inode(desiredFile), inode(agentFile)
	a.AppliedGeneration = 1
	if err := d.Save(p1, &a); err != nil { // the same payload, a new agent state
		t.Fatal(err)
	}
	if inode(desiredFile) != desiredIno {
		t.Error("the payload last saved was written again")
	}
	if inode(agentFile) == agentIno {
		t.Error("a changed agent state was not written")
	}
	agentIno = inode(agentFile)
	if err := d.Save(desiredPayload(t, 2), &a); err != nil {
		t.Fatal(err)
	}
	if inode(agentFile) != agentIno || inode(desiredFile) == desiredIno {
		t.Error("want the new payload written and the unchanged agent state not")
	}
	if err := d.Save(nil, nil); err != nil {
		t.Fatalf("saving nothing: %v", err)
	}

	// A directory in the way of agent.json's rename: the save fails
	// after desired.json was replaced, and the next save writes both.
	if err := os.Remove(filepath.Join(d.Root(), "v1", agentFile)); err != nil {
		t.Fatal(err)
	}
	block := filepath.Join(d.Root(), "v1", agentFile)
	if err := os.Mkdir(block, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(block, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	a.AppliedGeneration = 3
	if err := d.Save(desiredPayload(t, 3), &a); err == nil || !strings.Contains(err.Error(), agentFile) {
		t.Fatalf("save with agent.json blocked: %v, want an error naming it", err)
	}
	if err := os.RemoveAll(block); err != nil {
		t.Fatal(err)
	}
	if err := d.Save(desiredPayload(t, 3), &a); err != nil {
		t.Fatal(err)
	}
	if ds, err := d.LoadDesired(); err != nil || ds.Generation != 3 {
		t.Fatalf("desired after the retry = %+v, %v", ds, err)
	}
	if got, err := d.LoadAgent(); err != nil || got.AppliedGeneration != 3 {
		t.Fatalf("agent after the retry = %+v, %v", got, err)
	}
	entries, _ := os.ReadDir(filepath.Join(d.Root(), "v1"))
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
}

func TestCorruptFilesAreSetAsideIndependently(t *testing.T) {
	d, _ := Open(t.TempDir())
	if err := d.SaveDesiredPayload(desiredPayload(t, 2)); err != nil {
		t.Fatal(err)
	}
	if err := d.SaveAgent(Agent{AppliedGeneration: 2, Containers: History{{Pod: "p", Container: "c"}: {Restarts: 1}}}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(d.Root(), "v1", "desired.json")
	if err := os.WriteFile(p, []byte(`{"apiVersion":"fleet/v1","kind":"DesiredSt`), 0o600); err != nil {
		t.Fatal(err)
	}
	ds, err := d.LoadDesired()
	if ds != nil || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt desired: %v %v", ds, err)
	}
	if _, err := os.Stat(p + ".corrupt"); err != nil {
		t.Fatalf("corrupt file not kept aside: %v", err)
	}
	// Read again: now simply absent, not an error.
	if ds, err := d.LoadDesired(); ds != nil || err != nil {
		t.Fatalf("second load: %v %v", ds, err)
	}
	// The other file is still good.
	a, err := d.LoadAgent()
	if err != nil || a.AppliedGeneration != 2 {
		t.Fatalf("agent state lost with the desired file: %+v %v", a, err)
	}
}

func TestInvalidDesiredIsCorrupt(t *testing.T) {
	d, _ := Open(t.TempDir())
	bad := desiredState(1)
	bad.Pods[0].Spec.Containers[0].Image = ""
	b, _ := json.Marshal(bad)
	if err := WriteFileAtomic(filepath.Join(d.Root(), "v1", "desired.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.LoadDesired(); !errors.Is(err, ErrCorrupt) || !errors.Is(err, schema.ErrInvalid) {
		t.Fatalf("invalid desired: %v", err)
	}
}

func TestAgentWrongVersionOrGarbage(t *testing.T) {
	for _, content := range []string{`{"version":99}`, "\x00\x01garbage", ""} {
		d, _ := Open(t.TempDir())
		if err := os.WriteFile(filepath.Join(d.Root(), "v1", "agent.json"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		a, err := d.LoadAgent()
		if !errors.Is(err, ErrCorrupt) || a.Containers == nil {
			t.Errorf("%q: %+v %v", content, a, err)
		}
	}
}

func TestWriteFileAtomicFailureLeavesOldContent(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := WriteFileAtomic(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Renaming over a directory fails after the temp file was written.
	if err := WriteFileAtomic(filepath.Join(dir, "sub", "f"), []byte("x"), 0o600); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
	target := filepath.Join(dir, "d")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "keep"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(target, []byte("new"), 0o600); err == nil {
		t.Fatal("rename over a non-empty directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temp file left after failure: %s", e.Name())
		}
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("content = %q", b)
	}
}

// TestWriteFileAtomicModesAndReplace: the file gets exactly the mode asked
// for, whatever the umask, keeps it across replacements, and no
// temporary file is left behind.
func TestWriteFileAtomicModesAndReplace(t *testing.T) {
	dir := t.TempDir()
	for _, mode := range []os.FileMode{0o600, 0o644, 0o640} {
		p := filepath.Join(dir, "f"+mode.String())
		for i, content := range []string{"first", "second, longer", "3"} {
			if err := WriteFileAtomic(p, []byte(content), mode); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != mode {
				t.Errorf("write %d: mode %v, want %v", i, fi.Mode().Perm(), mode)
			}
			if b, _ := os.ReadFile(p); string(b) != content {
				t.Errorf("write %d: content %q, want %q", i, b, content)
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want the three files only", names)
	}
}

func TestKeyText(t *testing.T) {
	k := Key{Pod: "p", Container: "c", Hash: "h"}
	b, _ := k.MarshalText()
	var k2 Key
	if err := k2.UnmarshalText(b); err != nil || k2 != k {
		t.Fatalf("%v %v", k2, err)
	}
	if err := k2.UnmarshalText([]byte("nope")); err == nil {
		t.Fatal("bad key accepted")
	}
}

func TestClientIDStableAndUnguessable(t *testing.T) {
	root := t.TempDir()
	d, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	id, err := d.ClientID("pi-1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(id, "pi-1-") || len(id) != len("pi-1-")+16 {
		t.Fatalf("client id %q: want pi-1- and 16 hex digits", id)
	}
	d2, _ := Open(root)
	if again, err := d2.ClientID("pi-1"); err != nil || again != id {
		t.Errorf("after reopening: %q, %v; want the same %q", again, err, id)
	}
	other, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if id2, _ := other.ClientID("pi-1"); id2 == id {
		t.Error("two state dirs made the same client id")
	}
}

// BenchmarkSave: one reconcile pass's save of agent.json (the usual
// pass), on /dev/shm when there is one, as the scale suite's state.
func BenchmarkSave(b *testing.B) {
	root := b.TempDir()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if root, err = os.MkdirTemp("/dev/shm", "state-bench-"); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = os.RemoveAll(root) })
	}
	d, err := Open(root)
	if err != nil {
		b.Fatal(err)
	}
	k := Key{Pod: "scale", Container: "app", Hash: "0123456789abcdef"}
	a := Agent{Store: "00000000-0000-4000-8000-000000000000", Containers: History{k: {}}}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		a.AppliedGeneration = int64(i + 1)
		if err := d.Save(nil, &a); err != nil {
			b.Fatal(err)
		}
	}
}

// TestWriteFilesAtomicAllOrNothingBeforeRename: a file that cannot be
// written stops the batch before any rename: the files before it keep
// their old content and no temporary file is left.
func TestWriteFilesAtomicAllOrNothingBeforeRename(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFileAtomic(filepath.Join(dir, "a"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := writeFilesAtomic(dir, []fileWrite{
		{name: "a", data: []byte("new"), perm: 0o600},
		{name: filepath.Join("missing", "b"), data: []byte("b"), perm: 0o600},
	})
	if err == nil {
		t.Fatal("a batch with a file in a missing directory succeeded")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a")); string(b) != "old" {
		t.Errorf("a = %q, want the old content", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want a only", names)
	}
}
