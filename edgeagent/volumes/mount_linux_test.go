package volumes

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// kernelManager is a Manager that really mounts (root only); everything
// it mounted under the state directory is detached at cleanup.
func kernelManager(t *testing.T) (*Manager, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("FLEET_REQUIRE_CONTAINERD") == "1" {
			t.Fatal("mounting needs root, and FLEET_REQUIRE_CONTAINERD=1 asks for every root test")
		}
		t.Skip("mounting needs root")
	}
	m, root := newManager(t, Kernel{})
	t.Cleanup(func() {
		if _, err := m.Collect(func(string, string) bool { return false }, func(string) bool { return false }); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if left, _ := (Kernel{}).MountsUnder(root); len(left) > 0 {
			t.Errorf("mounts left: %v", left)
		}
	})
	return m, root
}

func TestKernelMemoryEmptyDir(t *testing.T) {
	m, _ := kernelManager(t)
	p := Pod{Name: "p", Hash: "h", Spec: &schema.PodSpec{
		Volumes:    []schema.Volume{{Name: "ram", EmptyDir: &schema.EmptyDirVolume{Medium: "Memory", SizeLimit: "8Mi"}}},
		Containers: []schema.Container{{Name: "app", VolumeMounts: []schema.VolumeMount{{Name: "ram", MountPath: "/ram"}}}},
	}}
	mounts, err := m.Mounts(p, &p.Spec.Containers[0], &staticFiles{})
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(mounts[0].HostPath, &st); err != nil {
		t.Fatal(err)
	}
	const tmpfsMagic = 0x01021994
	if st.Type != tmpfsMagic || uint64(st.Blocks)*uint64(st.Bsize) != 8<<20 {
		t.Fatalf("statfs: type %#x, %d bytes; want a tmpfs of 8 MiB", st.Type, uint64(st.Blocks)*uint64(st.Bsize))
	}
	// A second call does not mount it twice.
	if _, err := m.Mounts(p, &p.Spec.Containers[0], &staticFiles{}); err != nil {
		t.Fatal(err)
	}
	if pts, _ := (Kernel{}).MountsUnder(mounts[0].HostPath); len(pts) != 1 {
		t.Fatalf("mounts: %v", pts)
	}
}

// TestKernelSubPath: a subPath is created in an emptyDir or persistent
// volume, bind-mounted from what was opened, and refused when it is, or
// goes through, a link out of the volume.
func TestKernelSubPath(t *testing.T) {
	m, root := kernelManager(t)
	p := Pod{Name: "p", Hash: "h", Spec: &schema.PodSpec{
		Volumes: []schema.Volume{{Name: "data", Persistent: &schema.PersistentVolume{}}},
		Containers: []schema.Container{{Name: "app", VolumeMounts: []schema.VolumeMount{
			{Name: "data", MountPath: "/logs", SubPath: "app/logs"},
		}}},
	}}
	mounts, err := m.Mounts(p, &p.Spec.Containers[0], &staticFiles{})
	if err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(root, "volumes", "p", "data")
	for _, d := range []string{"app", "app/logs"} {
		if fi, err := os.Stat(filepath.Join(vol, d)); err != nil || fi.Mode().Perm() != 0o777 {
			t.Errorf("created %s: %v %v, want mode 0777", d, fi, err)
		}
	}
	if err := os.WriteFile(filepath.Join(mounts[0].HostPath, "x.log"), []byte("hi"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(vol, "app", "logs", "x.log")); err != nil || string(b) != "hi" {
		t.Fatalf("through the bind: %q %v", b, err)
	}

	// A workload makes links in its volume: out of it, and to a file in it.
	if err := os.Symlink("/etc", filepath.Join(vol, "evil")); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"evil", "evil/passwd", "app/../../../../etc"} {
		c := schema.Container{Name: "c" + strings.ReplaceAll(sub, "/", ""), VolumeMounts: []schema.VolumeMount{{Name: "data", MountPath: "/x", SubPath: sub}}}
		if got, err := m.Mounts(p, &c, &staticFiles{}); err == nil {
			t.Errorf("subPath %q mounted %v", sub, got)
		}
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatalf("the host's /etc: %v", err)
	}
}
