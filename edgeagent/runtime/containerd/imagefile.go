package containerd

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/containerd/containerd/archive/compression"
	"github.com/containerd/containerd/content"
	"github.com/containerd/containerd/images"
	"github.com/containerd/platforms"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/fleetmq/fleet/schema"
)

// ReadImageFile makes image present as a pod's image is (the registry
// configuration, mirrors and credentials of EnsureImage; IfNotPresent)
// and copies the regular file at file in its layers, for this platform,
// to w: the upper layer that has it wins, and a whiteout above hides it.
// The agent gets its own new binary this way (edgeagent/selfupdate).
func (r *Runtime) ReadImageFile(ctx context.Context, image, file string, w io.Writer) (int64, error) {
	if err := r.EnsureImage(ctx, image, schema.PullIfNotPresent); err != nil {
		return 0, err
	}
	ctx = r.nsCtx(ctx)
	ref, err := normalizeRef(image)
	if err != nil {
		return 0, fmt.Errorf("read %s from %s: %w", file, image, err)
	}
	img, err := r.client.ImageService().Get(ctx, ref)
	if err != nil {
		return 0, fmt.Errorf("read %s from %s: %w", file, image, err)
	}
	cs := r.client.ContentStore()
	m, err := images.Manifest(ctx, cs, img.Target, platforms.Default())
	if err != nil {
		return 0, fmt.Errorf("read %s from %s: %w", file, image, err)
	}
	want := cleanTarPath(file)
	for i := len(m.Layers) - 1; i >= 0; i-- {
		n, found, err := copyFromLayer(ctx, cs, m.Layers[i], want, w)
		if err != nil || found {
			if err != nil {
				err = fmt.Errorf("read %s from %s: layer %d: %w", file, image, i, err)
			}
			return n, err
		}
	}
	return 0, fmt.Errorf("read %s from %s: no such file in its %d layers", file, image, len(m.Layers))
}

// errHidden says a layer deletes the file (a whiteout) above any layer
// that has it.
var errHidden = errors.New("deleted by a whiteout")

// copyFromLayer looks for want in one layer: found says it was there (or
// hidden, with errHidden).
func copyFromLayer(ctx context.Context, cs content.Store, desc ocispec.Descriptor, want string, w io.Writer) (int64, bool, error) {
	ra, err := cs.ReaderAt(ctx, desc)
	if err != nil {
		return 0, false, err
	}
	defer ra.Close()
	rd, err := compression.DecompressStream(content.NewReader(ra))
	if err != nil {
		return 0, false, err
	}
	defer rd.Close()
	dir, base := path.Split(want)
	tr := tar.NewReader(rd)
	opaque := false // the layer hides the lower layers' dir, not its own
	for {
		h, err := tr.Next()
		if err == io.EOF {
			if opaque {
				return 0, true, errHidden
			}
			return 0, false, nil
		}
		if err != nil {
			return 0, false, err
		}
		name := cleanTarPath(h.Name)
		switch {
		case name == want && h.Typeflag == tar.TypeReg:
			n, err := io.Copy(w, tr)
			return n, true, err
		case name == want:
			return 0, true, fmt.Errorf("%s is not a regular file (type %q)", want, h.Typeflag)
		case name == dir+".wh."+base:
			return 0, true, errHidden
		case name == dir+".wh..wh..opq":
			opaque = true
		}
	}
}

// cleanTarPath makes "./fleet-agent", "/fleet-agent" and "fleet-agent"
// alike.
func cleanTarPath(p string) string {
	return strings.TrimPrefix(path.Clean("/"+p), "/")
}
