package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// fakeDist writes stand-in agent binaries (distinct bytes per build) and
// their SHA256SUMS, as arm/build.sh lays them out.
func fakeDist(t *testing.T, builds ...string) (string, map[string][]byte) {
	t.Helper()
	dir := t.TempDir()
	bins := map[string][]byte{}
	var sums strings.Builder
	for _, b := range builds {
		data := bytes.Repeat([]byte("fake fleet-agent for "+b+"\n"), 1000+len(b))
		fn := "fleet-agent-linux-" + b
		if err := os.WriteFile(filepath.Join(dir, fn), data, 0o755); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(sum[:]), fn)
		bins[b] = data
	}
	// build.sh lists the fleet CLI builds too.
	fmt.Fprintf(&sums, "%s  fleet-linux-arm64\n", strings.Repeat("ab", 32))
	if err := os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(sums.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, bins
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// startRegistry serves ggcr's registry on loopback.
func startRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func runTool(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut)
	return out.String() + errOut.String(), err
}

// fleetAgentOf returns the /fleet-agent of img's single layer, and checks
// it is the only file, a regular one of mode 0755.
func fleetAgentOf(t *testing.T, img v1.Image) []byte {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("image has %d layers, want 1", len(layers))
	}
	mt, err := layers[0].MediaType()
	if err != nil || mt != types.OCILayer {
		t.Errorf("layer media type %q (%v), want %q", mt, err, types.OCILayer)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var got []byte
	n := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		if strings.TrimPrefix(hdr.Name, "/") != "fleet-agent" || hdr.Typeflag != tar.TypeReg || hdr.Mode&0o7777 != 0o755 {
			t.Errorf("layer entry %q type %c mode %o, want fleet-agent, a regular file of mode 0755", hdr.Name, hdr.Typeflag, hdr.Mode)
		}
		if got, err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
	if n != 1 {
		t.Errorf("layer has %d entries, want 1", n)
	}
	return got
}

type platformWant struct {
	platform string
	build    string
}

// checkIndex checks idx has exactly the platforms of want, each with the
// dist file of its build byte for byte and the version label.
func checkIndex(t *testing.T, idx v1.ImageIndex, bins map[string][]byte, version string, want []platformWant) {
	t.Helper()
	mt, err := idx.MediaType()
	if err != nil || mt != types.OCIImageIndex {
		t.Errorf("index media type %q (%v), want %q", mt, err, types.OCIImageIndex)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != len(want) {
		t.Fatalf("index has %d manifests, want %d (%v)", len(im.Manifests), len(want), want)
	}
	for i, d := range im.Manifests {
		w := want[i]
		if d.Platform == nil || platformString(*d.Platform) != w.platform {
			t.Fatalf("manifest %d platform %v, want %s", i, d.Platform, w.platform)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		got := fleetAgentOf(t, img)
		if !bytes.Equal(got, bins[w.build]) {
			t.Errorf("%s: /fleet-agent (%d bytes, %s) differs from dist build %s (%d bytes)", w.platform, len(got), digestOf(got), w.build, len(bins[w.build]))
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if platformString(v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}) != w.platform {
			t.Errorf("%s: config says %s/%s/%s", w.platform, cf.OS, cf.Architecture, cf.Variant)
		}
		if cf.Config.Labels[labelVersion] != version || cf.Config.Labels[labelDigest] != digestOf(bins[w.build]) {
			t.Errorf("%s: labels %v, want version %s and digest %s", w.platform, cf.Config.Labels, version, digestOf(bins[w.build]))
		}
	}
}

func TestPushAllPlatformsPullBack(t *testing.T) {
	dist, bins := fakeDist(t, "amd64", "arm64", "armv7", "armv6")
	host := startRegistry(t)
	ref := host + "/fleet/agent:v1.4.0"
	out, err := runTool(t, "--dist", dist, "--version", "v1.4.0", "--push", ref, "--insecure")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(tag)
	if err != nil {
		t.Fatalf("pull index back: %v", err)
	}
	// Both arm platforms carry the armv6 build: the rollout names one
	// digest for arm, and armv6 runs on ARMv7 too.
	checkIndex(t, idx, bins, "v1.4.0", []platformWant{
		{"linux/amd64", "amd64"}, {"linux/arm64", "arm64"},
		{"linux/arm/v7", "armv6"}, {"linux/arm/v6", "armv6"},
	})
	for _, l := range []string{
		"linux/amd64  amd64 ", "linux/arm64  arm64 ", "linux/arm/v7 arm ", "linux/arm/v6 arm ",
	} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(l), " ")) {
			t.Errorf("output lacks a row for %q:\n%s", l, out)
		}
	}
	wantLine := fmt.Sprintf("fleet agent upgrade --to v1.4.0 --image %s --digest amd64=%s --digest arm64=%s --digest arm=%s",
		tag.String(), digestOf(bins["amd64"]), digestOf(bins["arm64"]), digestOf(bins["armv6"]))
	if !strings.Contains(out, wantLine) {
		t.Errorf("output lacks %q:\n%s", wantLine, out)
	}
	for _, b := range []string{"amd64", "arm64", "armv6"} {
		if !strings.Contains(out, digestOf(bins[b])) {
			t.Errorf("output lacks the digest of %s", b)
		}
	}
	if strings.Contains(out, digestOf(bins["armv7"])) {
		t.Errorf("output names the armv7 build's digest, which the image does not carry:\n%s", out)
	}
}

func TestPushArmv7BuildOnly(t *testing.T) {
	dist, bins := fakeDist(t, "arm64", "armv7", "armv6")
	host := startRegistry(t)
	ref := host + "/fleet/agent:v1.4.1"
	out, err := runTool(t, "--dist", dist, "--version", "v1.4.1", "--push", ref, "--insecure", "--arm-build", "armv7")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(r)
	if err != nil {
		t.Fatal(err)
	}
	checkIndex(t, idx, bins, "v1.4.1", []platformWant{{"linux/arm64", "arm64"}, {"linux/arm/v7", "armv7"}})
	if !strings.Contains(out, "--digest arm="+digestOf(bins["armv7"])) || !strings.Contains(out, "no linux/arm/v6") {
		t.Errorf("output lacks the armv7 digest or the ARMv6 note:\n%s", out)
	}
}

func TestOCILayoutAndTarball(t *testing.T) {
	dist, bins := fakeDist(t, "arm64", "armv6")
	want := []platformWant{{"linux/arm64", "arm64"}, {"linux/arm/v7", "armv6"}, {"linux/arm/v6", "armv6"}}

	dir := filepath.Join(t.TempDir(), "oci")
	out, err := runTool(t, "--dist", dist, "--version", "v2.0.0", "--oci-layout", dir, "--name", "registry.example.com/fleet/agent:v2.0.0")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	checkIndex(t, layoutIndex(t, dir, "registry.example.com/fleet/agent:v2.0.0"), bins, "v2.0.0", want)
	if !strings.Contains(out, "--image registry.example.com/fleet/agent:v2.0.0") {
		t.Errorf("output lacks the image:\n%s", out)
	}

	tarFile := filepath.Join(t.TempDir(), "fleet-agent-image.tar")
	out, err = runTool(t, "--dist", dist, "--version", "v2.0.0", "-o", tarFile)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	unpacked := t.TempDir()
	untar(t, tarFile, unpacked)
	checkIndex(t, layoutIndex(t, unpacked, "docker.io/fleetmq/fleet-agent:v2.0.0"), bins, "v2.0.0", want)
	if ents, _ := os.ReadDir(filepath.Dir(tarFile)); len(ents) != 1 {
		t.Errorf("-o left %d files next to the tarball, want only it", len(ents))
	}
}

// layoutIndex returns the image index of the OCI layout dir and checks
// the name containerd's import reads.
func layoutIndex(t *testing.T, dir, wantName string) v1.ImageIndex {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json has %d entries, want 1", len(im.Manifests))
	}
	if got := im.Manifests[0].Annotations["io.containerd.image.name"]; got != wantName {
		t.Errorf("io.containerd.image.name %q, want %q", got, wantName)
	}
	idx, err := top.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func untar(t *testing.T, file, dir string) {
	t.Helper()
	fh, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	tr := tar.NewReader(fh)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if hdr.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(path, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// repoTags lists the tags of repo in the registry at host.
func repoTags(t *testing.T, host, repo string) []string {
	t.Helper()
	r, err := name.NewRepository(host+"/"+repo, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	tags, err := remote.List(r)
	if err != nil {
		return nil // the repository does not exist: nothing was pushed
	}
	return tags
}

func TestBadInputPushesNothing(t *testing.T) {
	host := startRegistry(t)
	cases := []struct {
		name    string
		setup   func(t *testing.T, dist string)
		args    []string
		wantErr string
	}{
		{"missing dist file", nil, []string{"--platforms", "linux/arm64,linux/amd64"}, "fleet-agent-linux-amd64: missing"},
		{"missing arm build", nil, []string{"--arm-build", "armv7"}, "fleet-agent-linux-armv7: missing"},
		{"sums mismatch", func(t *testing.T, dist string) {
			if err := os.WriteFile(filepath.Join(dist, "fleet-agent-linux-arm64"), []byte("tampered"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, nil, "does not match"},
		{"not in sums", func(t *testing.T, dist string) {
			if err := os.WriteFile(filepath.Join(dist, "SHA256SUMS"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}, nil, "is not listed in"},
		{"no sums", func(t *testing.T, dist string) {
			if err := os.Remove(filepath.Join(dist, "SHA256SUMS")); err != nil {
				t.Fatal(err)
			}
		}, nil, "SHA256SUMS"},
		{"garbled sums", func(t *testing.T, dist string) {
			if err := os.WriteFile(filepath.Join(dist, "SHA256SUMS"), []byte("not a sum line\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, nil, "is not sha256sum output"},
		{"unknown platform", nil, []string{"--platforms", "linux/arm64,linux/riscv64"}, `unknown platform "linux/riscv64"`},
		{"v6 from the armv7 build", nil, []string{"--platforms", "linux/arm/v6", "--arm-build", "armv7"}, "linux/arm/v6 cannot carry the armv7 build"},
		{"bad arm build", nil, []string{"--arm-build", "armv8"}, `--arm-build "armv8"`},
		{"no version", nil, []string{"--version", ""}, "--version is required"},
		{"bad version", nil, []string{"--version", "v1 .0"}, `--version "v1 .0"`},
		{"empty dist", func(t *testing.T, dist string) {
			for _, b := range []string{"arm64", "armv6"} {
				if err := os.Remove(filepath.Join(dist, "fleet-agent-linux-"+b)); err != nil {
					t.Fatal(err)
				}
			}
		}, nil, "no agent build in"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dist, _ := fakeDist(t, "arm64", "armv6")
			if tc.setup != nil {
				tc.setup(t, dist)
			}
			repo := "fleet/" + strings.ReplaceAll(tc.name, " ", "-")
			args := append([]string{"--dist", dist, "--version", "v1.4.0", "--push", host + "/" + repo + ":v1.4.0", "--insecure"}, tc.args...)
			out, err := runTool(t, args...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one containing %q\n%s", err, tc.wantErr, out)
			}
			if tags := repoTags(t, host, repo); len(tags) != 0 {
				t.Errorf("pushed %v despite the error", tags)
			}
		})
	}
}

func TestBadFlags(t *testing.T) {
	dist, _ := fakeDist(t, "arm64")
	nonEmpty := t.TempDir()
	if err := os.WriteFile(filepath.Join(nonEmpty, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args    []string
		wantErr string
	}{
		{nil, "give exactly one of"},
		{[]string{"--push", "r.example/a:b", "-o", "x.tar"}, "give exactly one of"},
		{[]string{"--push", "Not A Ref"}, `--push "Not A Ref"`},
		{[]string{"--push", "r.example/fleet/agent"}, `--push "r.example/fleet/agent"`},
		{[]string{"-o", "x.zip"}, "ending in .tar"},
		{[]string{"-o", "/no/such/dir/x.tar"}, "does not exist"},
		{[]string{"--oci-layout", nonEmpty}, "not empty"},
		{[]string{"-o", "x.tar", "--insecure"}, "--insecure needs --push"},
		{[]string{"-o", filepath.Join(t.TempDir(), "x.tar"), "--name", "bad name"}, `--name "bad name"`},
		{[]string{"-o", "x.tar", "stray"}, `unexpected argument "stray"`},
	}
	for _, tc := range cases {
		out, err := runTool(t, append([]string{"--dist", dist, "--version", "v1.0.0"}, tc.args...)...)
		var ue usageError
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.As(err, &ue) {
			t.Errorf("%v: err = %v, want a usage error containing %q\n%s", tc.args, err, tc.wantErr, out)
		}
	}
}

func TestHelpTeaches(t *testing.T) {
	out, err := runTool(t, "--help")
	if !errors.Is(err, flagErrHelp()) {
		t.Fatalf("--help: %v", err)
	}
	for _, s := range []string{"Examples:", "--push", "--oci-layout", "-o FILE.tar", "fleet agent upgrade", "SHA256SUMS"} {
		if !strings.Contains(out, s) {
			t.Errorf("--help lacks %q", s)
		}
	}
}

func flagErrHelp() error { return flag.ErrHelp }

// TestVersionFromBinaries checks the release comes from DIST/VERSION (what
// arm/build.sh writes) and that a version stamped into a real Go binary
// (readable when built without -trimpath) that contradicts it is refused.
func TestVersionFromBinaries(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module stamped\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dist := t.TempDir()
	bin := filepath.Join(dist, "fleet-agent-linux-arm64")
	cmd := exec.Command("go", "build", "-ldflags", "-s -w -X github.com/fleetmq/fleet/schema.Version=v9.8.7", "-o", bin, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dist, "SHA256SUMS"), []byte(strings.TrimPrefix(digestOf(data), "sha256:")+"  fleet-agent-linux-arm64\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dist, "VERSION"), []byte("v9.8.7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runTool(t, "--dist", dist, "--oci-layout", filepath.Join(t.TempDir(), "oci"))
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if !strings.Contains(out, "fleet agent upgrade --to v9.8.7 --image docker.io/fleetmq/fleet-agent:v9.8.7 --digest arm64="+digestOf(data)) {
		t.Errorf("the stamped version is not the release:\n%s", out)
	}
	_, err = runTool(t, "--dist", dist, "--version", "v1.0.0", "--oci-layout", filepath.Join(t.TempDir(), "oci"))
	if err == nil || !strings.Contains(err.Error(), "is version v9.8.7 but --version says v1.0.0") {
		t.Errorf("a --version other than the stamped one: err = %v", err)
	}
	if err := os.WriteFile(filepath.Join(dist, "VERSION"), []byte("v9.9.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = runTool(t, "--dist", dist, "--oci-layout", filepath.Join(t.TempDir(), "oci"))
	if err == nil || !strings.Contains(err.Error(), "is version v9.8.7 but "+filepath.Join(dist, "VERSION")+" says v9.9.0") {
		t.Errorf("a DIST/VERSION other than the stamped one: err = %v", err)
	}
}

// TestReadsBuildShOutput runs the real arm/build.sh, with GO a fake
// compiler (a named fake: it writes a small file per build, so the test
// takes no minutes of cross-compiling), and packs what it laid out: the
// file names, SHA256SUMS and VERSION the tool reads are build.sh's own.
func TestReadsBuildShOutput(t *testing.T) {
	dist := t.TempDir()
	fakeGo := filepath.Join(t.TempDir(), "fake-go")
	script := `#!/bin/sh
# fake go build: writes "fake GOARCH GOARM OUT" to the -o file OUT
out=
while [ $# -gt 0 ]; do
	case $1 in -o) out=$2; shift ;; esac
	shift
done
printf 'fake %s %s %s\n' "$GOARCH" "$GOARM" "$out" >"$out"
`
	if err := os.WriteFile(fakeGo, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "../build.sh")
	cmd.Env = append(os.Environ(), "GO="+fakeGo, "DIST="+dist, "VERSION=v3.1.4", "ARCHES=amd64 arm64 armv7 armv6")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("arm/build.sh: %v\n%s", err, out)
	}
	bins := map[string][]byte{}
	for _, b := range []string{"amd64", "arm64", "armv7", "armv6"} {
		data, err := os.ReadFile(filepath.Join(dist, "fleet-agent-linux-"+b))
		if err != nil {
			t.Fatal(err)
		}
		bins[b] = data
	}
	host := startRegistry(t)
	ref := host + "/fleet/agent:v3.1.4"
	out, err := runTool(t, "--dist", dist, "--push", ref, "--insecure")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(r)
	if err != nil {
		t.Fatal(err)
	}
	checkIndex(t, idx, bins, "v3.1.4", []platformWant{
		{"linux/amd64", "amd64"}, {"linux/arm64", "arm64"},
		{"linux/arm/v7", "armv6"}, {"linux/arm/v6", "armv6"},
	})
	if !strings.Contains(out, "fleet agent upgrade --to v3.1.4 ") {
		t.Errorf("the version is not build.sh's VERSION:\n%s", out)
	}
}
