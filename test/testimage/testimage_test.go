package testimage_test

import (
	"archive/tar"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/fleetmq/fleet/test/sysdeps"
	"github.com/fleetmq/fleet/test/testimage"
)

func TestBuild(t *testing.T) {
	tests := []struct {
		opts    testimage.Options
		ref     string
		arch    string
		variant string
		cmd     []string
	}{
		{opts: testimage.Options{}, ref: testimage.DefaultRef, arch: runtime.GOARCH, cmd: []string{"sleep", "forever"}},
		{
			opts: testimage.Options{Ref: "fleet.test/arm:v2", Arch: "arm64", Cmd: []string{"serve", ":8080"}},
			ref:  "fleet.test/arm:v2", arch: "arm64", cmd: []string{"serve", ":8080"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.arch, func(t *testing.T) {
			path, ref := testimage.Build(t, tc.opts)
			if ref != tc.ref {
				t.Errorf("ref %q, want %q", ref, tc.ref)
			}
			if again, _ := testimage.Build(t, tc.opts); again != path {
				t.Errorf("second Build gave %s, want the cached %s", again, path)
			}
			tag, err := name.NewTag(ref)
			if err != nil {
				t.Fatal(err)
			}
			img, err := tarball.ImageFromPath(path, &tag)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.OS != "linux" || cf.Architecture != tc.arch {
				t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, tc.arch)
			}
			if fmt.Sprint(cf.Config.Entrypoint) != "[/app]" || fmt.Sprint(cf.Config.Cmd) != fmt.Sprint(tc.cmd) {
				t.Errorf("entrypoint %v cmd %v", cf.Config.Entrypoint, cf.Config.Cmd)
			}
			layers, err := img.Layers()
			if err != nil || len(layers) != 1 {
				t.Fatalf("%d layers, %v; want 1", len(layers), err)
			}
		})
	}
}

// TestBuildShell: a Shell image holds busybox, its applets as links and
// /etc/hostname; asking for one of another architecture fails clearly.
func TestBuildShell(t *testing.T) {
	sysdeps.Require(t, "busybox")
	path, ref := testimage.Build(t, testimage.Options{Ref: "fleet.test/shell:v1", Shell: true})
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		files[h.Name] = h.Linkname + string(body[:min(len(body), 64)])
	}
	if files["bin/sh"] != "busybox" || files["bin/cat"] != "busybox" || files["etc/hostname"] != testimage.ShellHostname+"\n" {
		t.Errorf("shell image: bin/sh %q, bin/cat %q, etc/hostname %q", files["bin/sh"], files["bin/cat"], files["etc/hostname"])
	}
	if _, ok := files["bin/busybox"]; !ok {
		t.Error("shell image has no bin/busybox")
	}
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	if _, _, err := testimage.BuildTar(t.Context(), testimage.Options{Ref: "fleet.test/shell:v1", Shell: true, Arch: other}); err == nil || !strings.Contains(err.Error(), "host's busybox") {
		t.Errorf("a shell image for %s: %v, want an error about the host's busybox", other, err)
	}
}
