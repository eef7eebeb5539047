package containerdtest_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/cio"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/containerd/oci"

	"github.com/fleetmq/fleet/test/containerdtest"
	"github.com/fleetmq/fleet/test/testimage"
)

// TestDaemonLifecycle starts a daemon, runs a task in it and checks that
// Close kills the task, stops the daemon and leaves nothing behind.
func TestDaemonLifecycle(t *testing.T) {
	containerdtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	d, err := containerdtest.StartDaemon(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = d.Close() // test already failed
		}
	}()
	if n := len(d.Socket()); n > 100 {
		t.Fatalf("socket path %d bytes long", n)
	}

	tarPath, ref := testimage.Build(t, testimage.Options{})
	nctx := namespaces.WithNamespace(ctx, "harness")
	names, err := testimage.Import(nctx, d.Client(), tarPath, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0] != ref {
		t.Fatalf("imported %v, want [%s]", names, ref)
	}
	img, err := d.Client().GetImage(nctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := img.IsUnpacked(nctx, "overlayfs"); err != nil || !ok {
		t.Fatalf("IsUnpacked = %v, %v", ok, err)
	}
	c, err := d.Client().NewContainer(nctx, "c1",
		containerd.WithNewSnapshot("c1", img),
		containerd.WithNewSpec(oci.WithImageConfig(img)))
	if err != nil {
		t.Fatal(err)
	}
	task, err := c.NewTask(nctx, cio.NullIO)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Start(nctx); err != nil {
		t.Fatal(err)
	}
	pid := int(task.Pid())

	closed = true
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(d.Dir()); !os.IsNotExist(err) {
		t.Errorf("daemon dir still there: %v", err)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); !os.IsNotExist(err) {
		t.Errorf("container process %d survived Close", pid)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mi), d.Dir()) {
		t.Errorf("mounts left under %s", d.Dir())
	}
}
