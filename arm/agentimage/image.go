package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Labels and annotations the image carries.
const (
	labelVersion = "org.opencontainers.image.version"
	labelTitle   = "org.opencontainers.image.title"
	labelSource  = "org.opencontainers.image.source"
	// labelDigest is the SHA-256 of /fleet-agent, the digest an
	// AgentRollout names for the platform's architecture.
	labelDigest = "io.fleetmq.agent.digest"
)

// epoch is the time of every file and config: the same builds make the
// same image, byte for byte.
var epoch = time.Unix(0, 0).UTC()

// agentLayer is a layer holding data as /fleet-agent, mode 0755, root's.
func agentLayer(data []byte) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Name: "fleet-agent", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(data)),
		ModTime: epoch, Uname: "root", Gname: "root", Format: tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, fmt.Errorf("layer tar: %w", err)
	}
	if _, err := tw.Write(data); err != nil {
		return nil, fmt.Errorf("layer tar: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer tar: %w", err)
	}
	raw := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// agentImage is the single-layer image of b for platform p.
func agentImage(layer v1.Layer, b *build, p v1.Platform, version string) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "agentimage: /fleet-agent from " + b.name, Comment: b.digest},
	})
	if err != nil {
		return nil, fmt.Errorf("image for %s: %w", platformString(p), err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image for %s: %w", platformString(p), err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{
		Entrypoint: []string{"/fleet-agent"},
		Labels:     agentLabels(version, b.digest),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image for %s: %w", platformString(p), err)
	}
	return img, nil
}

func agentLabels(version, digest string) map[string]string {
	l := map[string]string{
		labelVersion: version,
		labelTitle:   "fleet-agent",
		labelSource:  "https://github.com/fleetmq/fleet",
	}
	if digest != "" {
		l[labelDigest] = digest
	}
	return l
}

// buildIndex makes the OCI image index: per platform one image, the arm
// platforms sharing one layer when they carry one build.
func buildIndex(plan []*build, version string) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var adds []mutate.IndexAddendum
	for _, b := range plan {
		layer, err := agentLayer(b.data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.file, err)
		}
		if b.layerSize, err = layer.Size(); err != nil {
			return nil, fmt.Errorf("%s: layer: %w", b.file, err)
		}
		for _, p := range b.platforms {
			img, err := agentImage(layer, b, p, version)
			if err != nil {
				return nil, err
			}
			pp := p
			adds = append(adds, mutate.IndexAddendum{
				Add: img,
				Descriptor: v1.Descriptor{
					Platform:    &pp,
					Annotations: map[string]string{labelVersion: version, labelDigest: b.digest},
				},
			})
		}
	}
	idx = mutate.AppendManifests(idx, adds...)
	idx = mutate.Annotations(idx, agentLabels(version, "")).(v1.ImageIndex)
	return idx, nil
}
