package containerd_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/runtime/containerd"
	"github.com/fleetmq/fleet/edgeagent/runtime/runtimetest"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/containerdtest"
	"github.com/fleetmq/fleet/test/testimage"
)

// testRegistry is an in-process registry holding the test image as
// HOST/fleet/app:v1, reachable over plain HTTP, and optionally behind
// basic auth; it counts the requests it gets.
type testRegistry struct {
	host     string // plain, no auth
	authHost string // same content, basic auth user:secret
	hits     atomic.Int64
}

func newTestRegistry(t *testing.T) *testRegistry {
	t.Helper()
	// The registry only serves tests that need containerd: check first, so
	// a run without containerd (the 32-bit ARM suite under qemu, whose PATH
	// holds neither containerd nor go) skips instead of failing to build
	// the image.
	containerdtest.Require(t)
	r := &testRegistry{}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	counted := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.hits.Add(1)
		h.ServeHTTP(w, req)
	})
	plain := httptest.NewServer(counted)
	t.Cleanup(plain.Close)
	authed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if u, p, ok := req.BasicAuth(); !ok || u != "user" || p != "secret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="fleet-test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		counted(w, req)
	}))
	t.Cleanup(authed.Close)
	r.host = plain.Listener.Addr().String()
	r.authHost = authed.Listener.Addr().String()

	tarPath, _ := testimage.Build(t, testimage.Options{})
	img, err := tarball.ImageFromPath(tarPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(r.host+"/fleet/app:v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatalf("push test image: %v", err)
	}
	r.hits.Store(0)
	return r
}

func TestEnsureImagePull(t *testing.T) {
	reg := newTestRegistry(t)
	e := newEmptyEnv(t)
	rt := e.newRuntime(t)
	ctx := context.Background()
	ref := reg.host + "/fleet/app:v1"

	// Missing: IfNotPresent pulls (plain HTTP, as for any localhost
	// registry) and unpacks.
	if err := rt.EnsureImage(ctx, ref, schema.PullIfNotPresent); err != nil {
		t.Fatal(err)
	}
	if reg.hits.Load() == 0 {
		t.Fatal("no request reached the registry")
	}
	e.assertUnpacked(t, ref)
	spec := e.spec("pulled", "exit", "3")
	spec.Image = ref
	exits := subscribe(t, rt)
	mustCreateStart(t, rt, spec)
	if ev := awaitExit(t, exits, "pulled"); ev.ExitCode != 3 {
		t.Errorf("exit code %d, want 3", ev.ExitCode)
	}

	// Present: IfNotPresent does not ask; Always does.
	reg.hits.Store(0)
	if err := rt.EnsureImage(ctx, ref, schema.PullIfNotPresent); err != nil {
		t.Fatal(err)
	}
	if n := reg.hits.Load(); n != 0 {
		t.Errorf("IfNotPresent on a present image made %d registry requests", n)
	}
	if err := rt.EnsureImage(ctx, ref, schema.PullAlways); err != nil {
		t.Fatal(err)
	}
	if reg.hits.Load() == 0 {
		t.Error("Always did not contact the registry")
	}
}

func TestEnsureImageMirrorAndAuth(t *testing.T) {
	reg := newTestRegistry(t)
	ctx := context.Background()

	t.Run("mirror", func(t *testing.T) {
		e := newEmptyEnv(t)
		rt := e.newRuntime(t, func(o *containerd.Options) {
			// mirror.fleet.test does not exist: only the mirror can answer.
			o.Registry.Mirrors = map[string][]string{"mirror.fleet.test": {"http://" + reg.host}}
		})
		ref := "mirror.fleet.test/fleet/app:v1"
		if err := rt.EnsureImage(ctx, ref, schema.PullAlways); err != nil {
			t.Fatal(err)
		}
		e.assertUnpacked(t, ref)
	})
	t.Run("auth", func(t *testing.T) {
		ref := reg.authHost + "/fleet/app:v1"
		e := newEmptyEnv(t)
		rt := e.newRuntime(t, func(o *containerd.Options) {
			o.Registry.Auth = map[string]containerd.RegistryAuth{reg.authHost: {Username: "user", Password: "secret"}}
		})
		if err := rt.EnsureImage(ctx, ref, schema.PullIfNotPresent); err != nil {
			t.Fatal(err)
		}
		e.assertUnpacked(t, ref)

		bad := newEmptyEnv(t).newRuntime(t, func(o *containerd.Options) {
			o.Registry.Auth = map[string]containerd.RegistryAuth{reg.authHost: {Username: "user", Password: "wrong"}}
		})
		if err := bad.EnsureImage(ctx, ref, schema.PullIfNotPresent); !errors.Is(err, runtime.ErrImage) {
			t.Errorf("wrong password: %v, want ErrImage", err)
		}
	})
}

// TestEnsureImageIfNotPresentOffline: a present image needs no registry,
// even when its content was imported but never unpacked.
func TestEnsureImageIfNotPresentOffline(t *testing.T) {
	var hits atomic.Int64
	counter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	t.Cleanup(counter.Close)

	e := newEmptyEnv(t)
	tarPath, ref := testimage.Build(t, testimage.Options{})
	f, err := os.Open(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := e.client().Import(e.ctx, f); err != nil { // no unpack
		t.Fatal(err)
	}
	e.ref = ref
	rt := e.newRuntime(t, func(o *containerd.Options) {
		o.Registry.Mirrors = map[string][]string{"fleet.test": {"http://" + counter.Listener.Addr().String()}}
	})
	start := time.Now()
	if err := rt.EnsureImage(context.Background(), ref, schema.PullIfNotPresent); err != nil {
		t.Fatal(err)
	}
	t.Logf("EnsureImage(IfNotPresent) with unpack: %v", time.Since(start))
	if n := hits.Load(); n != 0 {
		t.Errorf("%d registry requests", n)
	}
	e.assertUnpacked(t, ref)
	mustCreateStart(t, rt, e.spec("offline"))

	// Always on the same image does go to the registry, and fails.
	err = rt.EnsureImage(context.Background(), ref, schema.PullAlways)
	if !errors.Is(err, runtime.ErrImage) || hits.Load() == 0 {
		t.Errorf("Always: %v after %d requests; want ErrImage after asking the mirror", err, hits.Load())
	}
}

func TestEnsureImageUnreachable(t *testing.T) {
	e := newEmptyEnv(t)
	rt := e.newRuntime(t)
	for _, p := range []schema.PullPolicy{schema.PullIfNotPresent, schema.PullAlways} {
		start := time.Now()
		err := rt.EnsureImage(context.Background(), "127.0.0.1:1/nope:v1", p)
		if !errors.Is(err, runtime.ErrImage) {
			t.Errorf("%s: %v, want ErrImage", p, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: failed after %v, want quickly", p, d)
		}
	}
	if err := rt.EnsureImage(context.Background(), "fleet.test/app:v1", "Sometimes"); err == nil || errors.Is(err, runtime.ErrImage) {
		t.Errorf("unknown policy: %v, want a non-image error", err)
	}
}

func (e *env) assertUnpacked(t *testing.T, ref string) {
	t.Helper()
	img, err := e.client().GetImage(e.ctx, ref)
	if err != nil {
		t.Fatalf("image %s: %v", ref, err)
	}
	if ok, err := img.IsUnpacked(e.ctx, containerd.DefaultSnapshotter); err != nil || !ok {
		t.Fatalf("image %s unpacked = %v, %v", ref, ok, err)
	}
}

// TestPulledImagesAndRemoveImage: only images EnsureImage pulled are listed
// and removable; an imported image stays unlabelled even after a
// PullAlways refreshed it; removing a pulled image reclaims its content
// while a container created from it keeps running.
func TestPulledImagesAndRemoveImage(t *testing.T) {
	reg := newTestRegistry(t)
	ctx := context.Background()
	e := newEnv(t) // the test image imported as fleet.test/app:v1
	rt := e.newRuntime(t, func(o *containerd.Options) {
		o.Registry.Mirrors = map[string][]string{"fleet.test": {"http://" + reg.host}}
	})
	pulled := reg.host + "/fleet/app:v1"
	// The mirror serves fleet.test/app:v1 as its own app:v1.
	tarPath, _ := testimage.Build(t, testimage.Options{})
	img, err := tarball.ImageFromPath(tarPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	mirrored, err := name.ParseReference(reg.host+"/app:v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(mirrored, img); err != nil {
		t.Fatal(err)
	}
	if err := rt.EnsureImage(ctx, pulled, schema.PullIfNotPresent); err != nil {
		t.Fatal(err)
	}
	// Always on the imported image does pull (from the mirror), but the
	// image was there before the agent asked for it.
	if err := rt.EnsureImage(ctx, e.ref, schema.PullAlways); err != nil {
		t.Fatal(err)
	}
	list, err := rt.PulledImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != pulled || list[0].PulledAt.IsZero() {
		t.Fatalf("PulledImages = %+v, want only %s", list, pulled)
	}
	// A pull of an image the agent pulled before keeps it the agent's.
	if err := rt.EnsureImage(ctx, pulled, schema.PullAlways); err != nil {
		t.Fatal(err)
	}
	if list, _ := rt.PulledImages(ctx); len(list) != 1 {
		t.Fatalf("after a second pull: %+v", list)
	}
	if err := rt.RemoveImage(ctx, e.ref); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("RemoveImage of the imported image: %v, want ErrNotFound", err)
	}

	spec := e.spec("from-pulled", "sleep", "forever")
	spec.Image = pulled
	mustCreateStart(t, rt, spec)
	if err := rt.RemoveImage(ctx, pulled); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client().GetImage(e.ctx, pulled); !errdefs.IsNotFound(err) {
		t.Fatalf("image still there after RemoveImage: %v", err)
	}
	if list, _ := rt.PulledImages(ctx); len(list) != 0 {
		t.Fatalf("PulledImages after RemoveImage = %+v", list)
	}
	if c, ok := runtimetest.Find(t, rt, "from-pulled"); !ok || c.State != runtime.StateRunning {
		t.Fatalf("container of the removed image: %+v", c)
	}
	if _, err := e.client().GetImage(e.ctx, e.ref); err != nil {
		t.Fatalf("imported image gone: %v", err)
	}
	ds, err := rt.DiskSpace(ctx)
	if err != nil || ds.Total == 0 || !strings.HasPrefix(ds.Path, daemon.Root()) {
		t.Fatalf("DiskSpace = %+v, %v; want the daemon's snapshotter root under %s", ds, err, daemon.Root())
	}
	if err := rt.Stop(ctx, "from-pulled", 2*time.Second); err != nil {
		t.Fatal(err)
	}
}
