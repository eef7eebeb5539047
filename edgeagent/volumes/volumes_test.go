package volumes

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/podconfig"
	"github.com/fleetmq/fleet/schema"
)

// fakeMounter records mounts without mounting anything.
type fakeMounter struct {
	mu     sync.Mutex
	points map[string]string // mount point → what ("tmpfs size=N" or the bind source)
	fail   error
}

func newFakeMounter() *fakeMounter { return &fakeMounter{points: map[string]string{}} }

func (f *fakeMounter) MountTmpfs(dir string, size int64, mode fs.FileMode) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	f.points[dir] = "tmpfs"
	return nil
}

func (f *fakeMounter) Bind(source, target string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	real, err := os.Readlink(source) // /proc/self/fd/N
	if err != nil {
		return err
	}
	f.points[target] = real
	return nil
}

func (f *fakeMounter) Unmount(target string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.points, target)
	return nil
}

func (f *fakeMounter) MountsUnder(dir string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for p := range f.points {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	return out, nil
}

// staticFiles serves fixed files for configMap and secret volumes.
type staticFiles struct {
	cm, secret []podconfig.File
	err        error
}

func (s *staticFiles) ConfigMapFiles(*schema.ConfigMapVolume) ([]podconfig.File, error) {
	return s.cm, s.err
}

func (s *staticFiles) SecretFiles(*schema.SecretVolume) ([]podconfig.File, error) {
	return s.secret, s.err
}

func newManager(t *testing.T, m Mounter) (*Manager, string) {
	t.Helper()
	dir := t.TempDir()
	mgr, err := New(Options{StateDir: dir, Mounter: m})
	if err != nil {
		t.Fatal(err)
	}
	return mgr, dir
}

func testPod() Pod {
	host := "/"
	return Pod{Name: "sensor", Hash: "h1", Spec: &schema.PodSpec{
		Volumes: []schema.Volume{
			{Name: "scratch", EmptyDir: &schema.EmptyDirVolume{}},
			{Name: "ram", EmptyDir: &schema.EmptyDirVolume{Medium: "Memory", SizeLimit: "8Mi"}},
			{Name: "data", Persistent: &schema.PersistentVolume{}},
			{Name: "keep", Persistent: &schema.PersistentVolume{ReclaimPolicy: schema.ReclaimRetain}},
			{Name: "host", HostPath: &schema.HostPathVolume{Path: host}},
			{Name: "cfg", ConfigMap: &schema.ConfigMapVolume{Name: "cfg"}},
			{Name: "tls", Secret: &schema.SecretVolume{SecretName: "tls"}},
		},
		Containers: []schema.Container{{Name: "app", VolumeMounts: []schema.VolumeMount{
			{Name: "scratch", MountPath: "/scratch"},
			{Name: "ram", MountPath: "/ram"},
			{Name: "data", MountPath: "/data"},
			{Name: "keep", MountPath: "/keep", ReadOnly: true},
			{Name: "host", MountPath: "/host"},
			{Name: "cfg", MountPath: "/etc/app"},
			{Name: "tls", MountPath: "/tls"},
		}}},
	}}
}

func TestMounts(t *testing.T) {
	fm := newFakeMounter()
	m, root := newManager(t, fm)
	p := testPod()
	files := &staticFiles{
		cm:     []podconfig.File{{Path: "app.ini", Data: []byte("level=1"), Mode: 0o644}},
		secret: []podconfig.File{{Path: "key.pem", Data: []byte("PRIVATE"), Mode: 0o400}},
	}
	mounts, err := m.Mounts(p, &p.Spec.Containers[0], files)
	if err != nil {
		t.Fatal(err)
	}
	rev := filepath.Join(root, "pods", "sensor", "h1", "volumes")
	want := []schema.Mount{
		{HostPath: filepath.Join(rev, "scratch"), MountPath: "/scratch"},
		{HostPath: filepath.Join(rev, "ram"), MountPath: "/ram"},
		{HostPath: filepath.Join(root, "volumes", "sensor", "data"), MountPath: "/data"},
		{HostPath: filepath.Join(root, "volumes", "sensor", "keep"), MountPath: "/keep", ReadOnly: true},
		{HostPath: "/", MountPath: "/host"},
		{HostPath: filepath.Join(rev, "cfg"), MountPath: "/etc/app", ReadOnly: true},
		{HostPath: filepath.Join(rev, "tls"), MountPath: "/tls", ReadOnly: true},
	}
	if !slices.Equal(mounts, want) {
		t.Fatalf("mounts:\n%v\nwant\n%v", mounts, want)
	}
	for _, d := range []string{"scratch", "ram"} {
		if fi, err := os.Stat(filepath.Join(rev, d)); err != nil || fi.Mode().Perm() != 0o777 {
			t.Errorf("%s: %v %v", d, fi, err)
		}
	}
	if fm.points[filepath.Join(rev, "ram")] != "tmpfs" || fm.points[filepath.Join(rev, "tls")] != "tmpfs" {
		t.Errorf("tmpfs mounts: %v", fm.points)
	}
	if b, err := os.ReadFile(filepath.Join(rev, "cfg", "app.ini")); err != nil || string(b) != "level=1" {
		t.Errorf("configMap file: %q %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(rev, "tls", "key.pem")); err != nil || fi.Mode().Perm() != 0o400 {
		t.Errorf("secret file: %v %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(root, "volumes", "sensor", ".keep.retain")); err != nil {
		t.Errorf("retain marker: %v", err)
	}
	// Idempotent: a second call (a start after a reboot) changes nothing.
	again, err := m.Mounts(p, &p.Spec.Containers[0], files)
	if err != nil || !slices.Equal(again, mounts) {
		t.Fatalf("second Mounts: %v %v", again, err)
	}

	// A hostPath that does not exist and a missing ConfigMap are errors
	// naming them.
	p.Spec.Volumes[4].HostPath.Path = "/nonexistent/fleet"
	if _, err := m.Mounts(p, &p.Spec.Containers[0], files); err == nil || !strings.Contains(err.Error(), "/nonexistent/fleet") {
		t.Errorf("missing hostPath: %v", err)
	}
	p.Spec.Volumes[4].HostPath.Path = "/"
	if _, err := m.Mounts(p, &p.Spec.Containers[0], &staticFiles{err: errors.New(`configmap "cfg" not found`)}); err == nil || !strings.Contains(err.Error(), `volume cfg`) {
		t.Errorf("missing configMap: %v", err)
	}
}

func TestSecretsOnDiskWithoutTmpfs(t *testing.T) {
	fm := newFakeMounter()
	fm.fail = syscall.EPERM
	m, root := newManager(t, fm)
	p := Pod{Name: "p", Hash: "h", Spec: &schema.PodSpec{
		Volumes:    []schema.Volume{{Name: "tls", Secret: &schema.SecretVolume{SecretName: "tls"}}},
		Containers: []schema.Container{{Name: "app", VolumeMounts: []schema.VolumeMount{{Name: "tls", MountPath: "/tls"}}}},
	}}
	files := &staticFiles{secret: []podconfig.File{{Path: "k", Data: []byte("v"), Mode: 0o400}}}
	if _, err := m.Mounts(p, &p.Spec.Containers[0], files); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(root, "pods", "p", "h", "volumes", "tls", "k")); err != nil || fi.Mode().Perm() != 0o400 {
		t.Fatalf("secret file on disk: %v %v", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(root, "pods")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("its parent: %v %v", fi, err)
	}
}

// TestProjectedUpdateIsAtomic: a reader of a configMap volume's file sees
// the old content or the new, never a missing or partial file, while the
// files are rewritten; stale keys go, the old data directory goes.
func TestProjectedUpdateIsAtomic(t *testing.T) {
	dir := t.TempDir()
	write := func(files ...podconfig.File) {
		t.Helper()
		if _, err := writeProjected(dir, files, -1, -1); err != nil {
			t.Fatal(err)
		}
	}
	write(podconfig.File{Path: "a", Data: []byte("old"), Mode: 0o644}, podconfig.File{Path: "sub/b", Data: []byte("b"), Mode: 0o644})
	before := currentDigest(dir)
	if changed, err := writeProjected(dir, []podconfig.File{{Path: "a", Data: []byte("old"), Mode: 0o644}, {Path: "sub/b", Data: []byte("b"), Mode: 0o644}}, -1, -1); err != nil || changed {
		t.Fatalf("rewrite of the same files: changed %v, %v", changed, err)
	}

	// Reads run concurrently with each update; the next update waits
	// until the reads in flight when one ended have finished (updates are
	// rare, reads are not: a read that spans two updates is out of scope).
	stop := make(chan struct{})
	var bad []string
	var reads atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			b, err := os.ReadFile(filepath.Join(dir, "a"))
			if err != nil || (string(b) != "old" && !strings.HasPrefix(string(b), "new")) {
				bad = append(bad, string(b)+" "+errString(err))
			}
			reads.Add(1)
		}
	})
	for i := range 200 {
		write(podconfig.File{Path: "a", Data: []byte("new" + strings.Repeat("x", i)), Mode: 0o644})
		n := reads.Load()
		deadline := time.Now().Add(10 * time.Second)
		for reads.Load() < n+2 && time.Now().Before(deadline) {
			goruntime.Gosched()
		}
	}
	close(stop)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("a reader saw %d torn reads, e.g. %q", len(bad), bad[0])
	}
	if currentDigest(dir) == before {
		t.Error("digest did not change")
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 4 || !slices.Contains(names, "a") || !slices.Contains(names, dataLink) {
		t.Errorf("entries after updates: %v (want a, ..data, the data directory and the previous one)", names)
	}
	if _, err := writeProjected(dir, []podconfig.File{{Path: "..data", Data: nil}}, -1, -1); err == nil {
		t.Error("a file named ..data was written")
	}
	if _, err := writeProjected(dir, []podconfig.File{{Path: "x/../../etc", Data: nil}}, -1, -1); err == nil {
		t.Error("a path leaving the volume was written")
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestCollect(t *testing.T) {
	fm := newFakeMounter()
	m, root := newManager(t, fm)
	p := testPod()
	files := &staticFiles{}
	if _, err := m.Mounts(p, &p.Spec.Containers[0], files); err != nil {
		t.Fatal(err)
	}
	p2 := p
	p2.Hash = "h2"
	if _, err := m.Mounts(p2, &p2.Spec.Containers[0], files); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "volumes", "sensor", "data", "db"), []byte("rows"), 0o600); err != nil {
		t.Fatal(err)
	}

	// h2 runs: h1's revision goes, the persistent volumes stay.
	removed, err := m.Collect(func(pod, hash string) bool { return hash == "h2" }, func(string) bool { return true })
	if err != nil || !slices.Equal(removed, []string{"pods/sensor/h1"}) {
		t.Fatalf("Collect = %v, %v", removed, err)
	}
	if _, ok := fm.points[filepath.Join(root, "pods/sensor/h1/volumes/ram")]; ok {
		t.Error("h1's tmpfs still mounted")
	}
	if b, err := os.ReadFile(filepath.Join(root, "volumes", "sensor", "data", "db")); err != nil || string(b) != "rows" {
		t.Fatalf("persistent data: %q %v", b, err)
	}

	// The pod goes: everything but the Retain volume goes.
	removed, err = m.Collect(func(string, string) bool { return false }, func(string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if !slices.Equal(removed, []string{"pods/sensor/h2", "volumes/sensor/data"}) {
		t.Errorf("removed %v", removed)
	}
	if _, err := os.Stat(filepath.Join(root, "volumes", "sensor", "keep")); err != nil {
		t.Errorf("retained volume: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "pods", "sensor")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("pod dir left: %v", err)
	}
	if len(fm.points) != 0 {
		t.Errorf("mounts left: %v", fm.points)
	}
}

// TestCollectAfterEmpty: a Collect that found nothing skips the next
// reads, but not past what Mounts makes meanwhile.
func TestCollectAfterEmpty(t *testing.T) {
	fm := newFakeMounter()
	m, root := newManager(t, fm)
	for range 2 {
		if removed, err := m.Collect(func(string, string) bool { return false }, func(string) bool { return false }); err != nil || len(removed) != 0 {
			t.Fatalf("Collect on an empty state dir = %v, %v", removed, err)
		}
	}
	p := testPod()
	if _, err := m.Mounts(p, &p.Spec.Containers[0], &staticFiles{}); err != nil {
		t.Fatal(err)
	}
	removed, err := m.Collect(func(string, string) bool { return false }, func(string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if !slices.Equal(removed, []string{"pods/sensor/h1", "volumes/sensor/data"}) {
		t.Errorf("removed %v", removed)
	}
	if _, err := os.Stat(filepath.Join(root, "pods", "sensor")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("pod dir left: %v", err)
	}
}

func TestVolumeOwner(t *testing.T) {
	u := func(uid int64) *schema.SecurityContext { return &schema.SecurityContext{RunAsUser: &uid} }
	vm := []schema.VolumeMount{{Name: "v", MountPath: "/v"}}
	spec := &schema.PodSpec{Containers: []schema.Container{{Name: "a", VolumeMounts: vm, SecurityContext: u(1000)}, {Name: "b"}}}
	if uid, gid := volumeOwner(spec, "v"); uid != 1000 || gid != -1 {
		t.Errorf("one user: %d %d", uid, gid)
	}
	spec.Containers[1].VolumeMounts, spec.Containers[1].SecurityContext = vm, u(1001)
	if uid, _ := volumeOwner(spec, "v"); uid != -1 {
		t.Errorf("two users: %d", uid)
	}
}
