package containerd_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/fleetmq/fleet/edgeagent/runtime/containerd"
)

// layerOf is a gzipped layer of the given files (a nil content is a
// whiteout entry's empty file).
func layerOf(t *testing.T, files map[string]string) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for n, c := range files {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o755, Size: int64(len(c)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// pushLayers pushes an image of this platform made of layers as
// host/repo and returns its reference.
func pushLayers(t *testing.T, host, repo string, layers ...v1.Layer) string {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf.OS, cf.Architecture = "linux", goruntime.GOARCH
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	ref := host + "/" + repo
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return ref
}

// TestReadImageFile: the agent's binary comes out of an image pulled
// through the runtime's own registry configuration (here basic auth):
// the upper layer's copy wins, a whiteout hides it, a missing file is
// an error naming it.
func TestReadImageFile(t *testing.T) {
	reg := newTestRegistry(t)
	ctx := context.Background()
	rt := newEmptyEnv(t).newRuntime(t, func(o *containerd.Options) {
		o.Registry.Auth = map[string]containerd.RegistryAuth{reg.authHost: {Username: "user", Password: "secret"}}
	})
	upgraded := pushLayers(t, reg.host, "fleet/agent:v1.5.0",
		layerOf(t, map[string]string{"fleet-agent": "old binary", "etc/x": "x"}),
		layerOf(t, map[string]string{"./fleet-agent": "new binary"}))
	// Pushed without credentials, pulled through the registry's
	// authenticated front.
	upgraded = strings.Replace(upgraded, reg.host, reg.authHost, 1)
	var out bytes.Buffer
	n, err := rt.ReadImageFile(ctx, upgraded, "/fleet-agent", &out)
	if err != nil || out.String() != "new binary" || n != int64(len("new binary")) {
		t.Fatalf("read: %q (%d), %v; want the upper layer's copy", out.String(), n, err)
	}

	hidden := pushLayers(t, reg.host, "fleet/agent:hidden",
		layerOf(t, map[string]string{"fleet-agent": "old binary"}),
		layerOf(t, map[string]string{".wh.fleet-agent": ""}))
	hidden = strings.Replace(hidden, reg.host, reg.authHost, 1)
	if _, err := rt.ReadImageFile(ctx, hidden, "/fleet-agent", io.Discard); err == nil || !strings.Contains(err.Error(), "whiteout") {
		t.Errorf("a deleted file: %v, want the whiteout named", err)
	}
	missing := pushLayers(t, reg.host, "fleet/agent:none", layerOf(t, map[string]string{"app": "x"}))
	missing = strings.Replace(missing, reg.host, reg.authHost, 1)
	if _, err := rt.ReadImageFile(ctx, missing, "/fleet-agent", io.Discard); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing file: %v, want no such file", err)
	}
	bad := newEmptyEnv(t).newRuntime(t)
	if _, err := bad.ReadImageFile(ctx, upgraded, "/fleet-agent", io.Discard); err == nil {
		t.Error("read without the registry's credentials succeeded")
	}
}
