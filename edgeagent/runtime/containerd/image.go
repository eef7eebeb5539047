package containerd

import (
	"context"
	_ "crypto/sha256" // digest references ("repo@sha256:…") need it linked in
	"fmt"

	ctrd "github.com/containerd/containerd"
	"github.com/containerd/containerd/remotes/docker"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

// normalizeRef turns a user's image reference into containerd's image name:
// "nginx:1.25" → "docker.io/library/nginx:1.25", "nginx" → "…:latest".
func normalizeRef(image string) (string, error) {
	named, err := reference.ParseDockerRef(image)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", image, err)
	}
	return named.String(), nil
}

// EnsureImage makes image present and unpacked for the snapshotter.
// IfNotPresent (and an empty policy) never contacts a registry when the
// image is present; Always pulls, which for an unchanged image fetches the
// manifest only. Pull failures wrap runtime.ErrImage.
func (r *Runtime) EnsureImage(ctx context.Context, image string, policy schema.PullPolicy) error {
	ctx = r.nsCtx(ctx)
	ref, err := normalizeRef(image)
	if err != nil {
		return fmt.Errorf("ensure image: %w", err)
	}
	switch policy {
	case "", schema.PullIfNotPresent, schema.PullAlways:
	default:
		return fmt.Errorf("ensure image %s: unknown pull policy %q", image, policy)
	}
	unlock := r.locks.lock("image:" + ref)
	defer unlock()

	if policy != schema.PullAlways {
		present, err := r.unpackLocal(ctx, ref)
		if err != nil {
			return fmt.Errorf("ensure image %s: %w: %w", image, runtime.ErrImage, err)
		}
		if present {
			return nil
		}
	}
	return r.pull(ctx, image, ref)
}

// unpackLocal reports whether ref is present, unpacking it first if needed.
func (r *Runtime) unpackLocal(ctx context.Context, ref string) (bool, error) {
	img, err := r.client.GetImage(ctx, ref)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := r.ensureUnpacked(ctx, img); err != nil {
		if errdefs.IsNotFound(err) {
			// Record present, content gone (garbage collected): pull.
			r.log.Warn("image content missing, pulling again", "image", ref, "err", err)
			return false, nil
		}
		return false, err
	}
	return true, nil
}

func (r *Runtime) ensureUnpacked(ctx context.Context, img ctrd.Image) error {
	ok, err := img.IsUnpacked(ctx, r.opts.Snapshotter)
	if err != nil {
		return fmt.Errorf("check unpacked: %w", err)
	}
	if ok {
		return nil
	}
	if err := img.Unpack(ctx, r.opts.Snapshotter); err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	return nil
}

func (r *Runtime) pull(ctx context.Context, image, ref string) error {
	log := r.log.With("image", ref)
	log.Info("pulling image")
	resolver := docker.NewResolver(docker.ResolverOptions{Hosts: r.hosts})
	_, err := r.client.Pull(ctx, ref,
		ctrd.WithResolver(resolver),
		ctrd.WithPullUnpack,
		ctrd.WithPullSnapshotter(r.opts.Snapshotter))
	if err != nil {
		log.Warn("pull failed", "err", err)
		return fmt.Errorf("pull image %s: %w: %w", image, runtime.ErrImage, err)
	}
	log.Info("pulled image")
	return nil
}
