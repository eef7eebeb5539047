// Package testimage builds Fleet's test container image without a registry:
// it cross-compiles the small static program in ./app (see its doc for the
// script it runs), puts it at /app in a single layer and writes a docker
// archive with go-containerregistry. Import loads such an archive into a
// containerd namespace and unpacks it for a snapshotter.
//
// Built archives are cached on disk, keyed by the program source, the
// options and the Go version, so repeated test runs do not rebuild
// (FLEET_TESTIMAGE_CACHE moves the cache; CI gives it an empty directory).
package testimage

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/platforms"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// DefaultRef is the reference the image is tagged with unless Options.Ref
// says otherwise.
const DefaultRef = "fleet.test/app:v1"

// appFiles is the program's source: main.go and the files beside it.
//
//go:embed app/*.go
var appFiles embed.FS

// Options select what to build. The zero value builds DefaultRef for the
// host architecture.
type Options struct {
	// Ref is the image reference to tag the archive with.
	Ref string
	// Arch is the GOARCH to compile for (amd64, arm64, arm).
	Arch string
	// Variant is the ARM variant for Arch "arm": "v6" or "v7" (default v7).
	Variant string
	// Cmd is the image's default command (arguments to /app). Default
	// ["sleep", "forever"]: the container runs until it is signalled.
	Cmd []string
	// Env is added to the image's environment.
	Env []string
	// Shell adds the host's static busybox (Debian's busybox-static) as
	// /bin/busybox with /bin/sh, cat, stty and its other applets linked to
	// it, and /etc/hostname, so tests can exec a shell in the container.
	// The host's busybox runs on the host's architecture only.
	Shell bool
}

// BusyboxPath is where Debian's busybox-static installs the static
// busybox that Options.Shell copies into the image.
const BusyboxPath = "/bin/busybox"

// ShellHostname is the content of /etc/hostname in a Shell image.
const ShellHostname = "fleet-test-shell"

// shellApplets are linked to /bin/busybox in a Shell image.
var shellApplets = []string{"sh", "cat", "stty", "echo", "sleep", "yes", "head", "ls", "env", "tty", "id", "hostname", "true", "false", "seq", "tr", "dd", "printf", "test", "["}

func (o Options) withDefaults() Options {
	if o.Ref == "" {
		o.Ref = DefaultRef
	}
	if o.Arch == "" {
		o.Arch = goruntime.GOARCH
	}
	if o.Arch == "arm" && o.Variant == "" {
		o.Variant = "v7"
	}
	if o.Cmd == nil {
		o.Cmd = []string{"sleep", "forever"}
	}
	return o
}

// Build returns the path of a docker-archive tar of the test image and the
// reference it is tagged with, building it if needed. It fails t on error.
func Build(t testing.TB, opts Options) (tarPath, ref string) {
	t.Helper()
	tarPath, ref, err := BuildTar(context.Background(), opts)
	if err != nil {
		t.Fatalf("build test image: %v", err)
	}
	return tarPath, ref
}

var (
	buildMu sync.Mutex
	built   = map[string]string{} // cache key -> tar path
)

// BuildTar is Build without a testing.TB, for demos and tools. The returned
// file lives in the user's cache directory and must not be modified.
func BuildTar(ctx context.Context, opts Options) (tarPath, ref string, err error) {
	opts = opts.withDefaults()
	if _, err := name.NewTag(opts.Ref); err != nil {
		return "", "", fmt.Errorf("build test image: bad ref %q: %w", opts.Ref, err)
	}
	key, err := cacheKey(opts)
	if err != nil {
		return "", "", err
	}

	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[key]; ok {
		return p, opts.Ref, nil
	}
	dir, err := cacheDir()
	if err != nil {
		return "", "", err
	}
	p := filepath.Join(dir, key+".tar")
	if _, err := os.Stat(p); err == nil {
		built[key] = p
		return p, opts.Ref, nil
	}
	if err := build(ctx, opts, p); err != nil {
		return "", "", fmt.Errorf("build test image %s (%s): %w", opts.Ref, opts.Arch, err)
	}
	built[key] = p
	return p, opts.Ref, nil
}

func cacheKey(opts Options) (string, error) {
	b, err := json.Marshal(opts)
	if err != nil {
		return "", fmt.Errorf("build test image: %w", err)
	}
	h := sha256.New()
	if err := fs.WalkDir(appFiles, "app", func(p string, _ fs.DirEntry, err error) error {
		if err != nil || p == "app" {
			return err
		}
		b, err := appFiles.ReadFile(p)
		h.Write([]byte(p))
		h.Write(b)
		return err
	}); err != nil {
		return "", fmt.Errorf("build test image: %w", err)
	}
	h.Write(b)
	h.Write([]byte(goruntime.Version()))
	if opts.Shell {
		bb, err := os.ReadFile(BusyboxPath)
		if err != nil {
			return "", fmt.Errorf("build test image with a shell: %w (install busybox-static)", err)
		}
		h.Write(bb)
	}
	return hex.EncodeToString(h.Sum(nil))[:24], nil
}

// CacheEnv names a directory that replaces the default cache
// ($XDG_CACHE_HOME/fleet-testimage). CI points it at an empty directory so
// that no image left by an earlier run can hide a broken build path.
const CacheEnv = "FLEET_TESTIMAGE_CACHE"

func cacheDir() (string, error) {
	dir := os.Getenv(CacheEnv)
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		dir = filepath.Join(base, "fleet-testimage")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("build test image: %w", err)
	}
	return dir, nil
}

// build compiles the app and writes the archive to dst atomically.
func build(ctx context.Context, opts Options, dst string) error {
	work, err := os.MkdirTemp("", "fleet-testimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	bin, err := compile(ctx, work, opts)
	if err != nil {
		return err
	}
	if opts.Shell && opts.Arch != goruntime.GOARCH {
		return fmt.Errorf("a shell image runs the host's busybox: build it for %s, not %s", goruntime.GOARCH, opts.Arch)
	}
	layerTar, err := layerTar(bin, opts.Shell)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = opts.Arch
	cf.Variant = opts.Variant
	cf.Config = v1.Config{
		Entrypoint: []string{"/app"},
		Cmd:        opts.Cmd,
		Env:        append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "FLEET_TEST_IMAGE=1"}, opts.Env...),
		WorkingDir: "/",
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return fmt.Errorf("set config: %w", err)
	}
	tag, err := name.NewTag(opts.Ref)
	if err != nil {
		return err
	}
	tmp := dst + ".tmp-" + filepath.Base(work)
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write archive: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// compile builds app/main.go as a static linux binary in its own throwaway
// module, so it works from any working directory.
func compile(ctx context.Context, work string, opts Options) (string, error) {
	src := filepath.Join(work, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module fleettestapp\n\ngo 1.22\n"), 0o644); err != nil {
		return "", err
	}
	ents, err := appFiles.ReadDir("app")
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		b, err := appFiles.ReadFile("app/" + e.Name())
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(src, e.Name()), b, 0o644); err != nil {
			return "", err
		}
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("build the test image's program: the go command is not on PATH: %w", err)
	}
	out := filepath.Join(work, "app")
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", out, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(),
		"CGO_ENABLED=0", "GOOS=linux", "GOARCH="+opts.Arch,
		"GOFLAGS=-buildvcs=false", "GOWORK=off")
	if opts.Arch == "arm" {
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(opts.Variant, "v"))
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, b)
	}
	return out, nil
}

// layerTar returns an uncompressed layer holding /app, /tmp and /etc, and
// with shell busybox, its applets and /etc/hostname.
func layerTar(bin string, shell bool) ([]byte, error) {
	app, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	type entry struct {
		hdr  tar.Header
		data []byte
	}
	entries := []entry{
		{hdr: tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755}},
		{hdr: tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777}},
		{hdr: tar.Header{Name: "app", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(app))}, data: app},
	}
	if shell {
		bb, err := os.ReadFile(BusyboxPath)
		if err != nil {
			return nil, fmt.Errorf("shell image: %w (install busybox-static)", err)
		}
		hostname := []byte(ShellHostname + "\n")
		entries = append(entries,
			entry{hdr: tar.Header{Name: "etc/hostname", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(hostname))}, data: hostname},
			entry{hdr: tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755}},
			entry{hdr: tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bb))}, data: bb})
		for _, a := range shellApplets {
			entries = append(entries, entry{hdr: tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}})
		}
	}
	for _, e := range entries {
		hdr := e.hdr
		if err := tw.WriteHeader(&hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Import loads the archive at tarPath into the namespace carried by ctx (or
// the client's default namespace) and unpacks every image it holds for
// snapshotter (default "overlayfs"), so containers can be created from it
// without any registry. It returns the imported image names.
func Import(ctx context.Context, client *containerd.Client, tarPath, snapshotter string) ([]string, error) {
	if snapshotter == "" {
		snapshotter = "overlayfs"
	}
	f, err := os.Open(tarPath)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", tarPath, err)
	}
	defer f.Close()
	// All platforms, so that images for another architecture (run through
	// qemu) import too; each single-platform image is unpacked for its own
	// platform.
	imgs, err := client.Import(ctx, f, containerd.WithAllPlatforms(true))
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", tarPath, err)
	}
	if len(imgs) == 0 {
		return nil, fmt.Errorf("import %s: archive holds no image", tarPath)
	}
	var names []string
	for _, i := range imgs {
		img := containerd.NewImageWithPlatform(client, i, platforms.All)
		if err := img.Unpack(ctx, snapshotter); err != nil {
			return nil, fmt.Errorf("import %s: unpack %s: %w", tarPath, i.Name, err)
		}
		names = append(names, i.Name)
	}
	return names, nil
}
