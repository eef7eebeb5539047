package containerd

import (
	"context"
	_ "crypto/sha256" // digest references ("repo@sha256:…") need it linked in
	"fmt"
	"slices"
	"strings"
	"time"

	ctrd "github.com/containerd/containerd"
	"github.com/containerd/containerd/images"
	"github.com/containerd/containerd/plugin"
	"github.com/containerd/containerd/remotes/docker"
	"github.com/containerd/errdefs"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

// normalizeRef turns a user's image reference into containerd's image name:
// "nginx:1.25" → "docker.io/library/nginx:1.25", "nginx" → "…:latest".
func normalizeRef(image string) (string, error) {
	return runtime.ImageName(image)
}

// pulledFilter selects the images EnsureImage pulled.
var pulledFilter = fmt.Sprintf(`labels.%q`, runtime.LabelPulled)

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

// pull pulls ref and labels it runtime.LabelPulled when the pull brought
// it, or refreshed an image an earlier pull brought: an image that was
// here before (imported, or another tool's) stays unlabelled, so the
// agent never deletes it. (containerd's pull replaces an existing
// image's labels, so the label is set again after every pull.)
func (r *Runtime) pull(ctx context.Context, image, ref string) error {
	log := r.log.With("image", ref)
	ours := true
	if before, err := r.client.ImageService().Get(ctx, ref); err == nil {
		_, ours = before.Labels[runtime.LabelPulled]
	} else if !errdefs.IsNotFound(err) {
		return fmt.Errorf("pull image %s: %w: %w", image, runtime.ErrImage, err)
	}
	log.Info("pulling image")
	hosts := r.hosts
	if creds := runtime.PullCredentials(ctx); len(creds) > 0 {
		// A pod's imagePullSecrets: a lookup of its own, never kept.
		client := newRegistryClient()
		defer client.CloseIdleConnections()
		h, err := registryHostsWith(withPullCredentials(r.opts.Registry, creds), client)
		if err != nil {
			return fmt.Errorf("pull image %s: %w: %w", image, runtime.ErrImage, err)
		}
		hosts = h
	}
	resolver := docker.NewResolver(docker.ResolverOptions{Hosts: hosts})
	_, err := r.client.Pull(ctx, ref,
		ctrd.WithResolver(resolver),
		ctrd.WithPullUnpack,
		ctrd.WithPullSnapshotter(r.opts.Snapshotter))
	if err != nil {
		log.Warn("pull failed", "err", err)
		return fmt.Errorf("pull image %s: %w: %w", image, runtime.ErrImage, err)
	}
	if ours {
		img := images.Image{Name: ref, Labels: map[string]string{runtime.LabelPulled: time.Now().UTC().Format(time.RFC3339)}}
		if _, err := r.client.ImageService().Update(ctx, img, "labels."+runtime.LabelPulled); err != nil {
			// The image is usable; it is only not collected later.
			log.Warn("cannot label pulled image; it will not be garbage collected", "err", err)
		}
	}
	log.Info("pulled image")
	return nil
}

// PulledImages implements runtime.Runtime: the images of the namespace
// labelled runtime.LabelPulled.
func (r *Runtime) PulledImages(ctx context.Context) ([]runtime.Image, error) {
	ctx = r.nsCtx(ctx)
	list, err := r.client.ImageService().List(ctx, pulledFilter)
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	out := make([]runtime.Image, 0, len(list))
	for _, img := range list {
		at, _ := time.Parse(time.RFC3339, img.Labels[runtime.LabelPulled])
		out = append(out, runtime.Image{Name: img.Name, PulledAt: at})
	}
	slices.SortFunc(out, func(a, b runtime.Image) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// RemoveImage implements runtime.Runtime. It deletes the image record
// synchronously, so containerd's garbage collection has reclaimed the
// content and snapshots nothing else references when it returns.
func (r *Runtime) RemoveImage(ctx context.Context, image string) error {
	ctx = r.nsCtx(ctx)
	ref, err := normalizeRef(image)
	if err != nil {
		return fmt.Errorf("remove image: %w", err)
	}
	unlock := r.locks.lock("image:" + ref)
	defer unlock()
	is := r.client.ImageService()
	img, err := is.Get(ctx, ref)
	if errdefs.IsNotFound(err) {
		return fmt.Errorf("remove image %s: %w", image, runtime.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("remove image %s: %w", image, err)
	}
	if _, ok := img.Labels[runtime.LabelPulled]; !ok {
		return fmt.Errorf("remove image %s: not pulled by the agent: %w", image, runtime.ErrNotFound)
	}
	if err := is.Delete(ctx, ref, images.SynchronousDelete()); err != nil {
		if errdefs.IsNotFound(err) {
			return fmt.Errorf("remove image %s: %w", image, runtime.ErrNotFound)
		}
		return fmt.Errorf("remove image %s: %w", image, err)
	}
	r.log.Info("removed image", "image", ref)
	return nil
}

// DiskSpace implements runtime.Runtime: it measures the snapshotter's root
// directory (which containerd reports; the content store lives beside it
// under containerd's root), or Options.DiskPath when set. It fails when
// the directory is not visible to the agent (the agent in a container
// without containerd's root mounted, say).
func (r *Runtime) DiskSpace(ctx context.Context) (runtime.DiskSpace, error) {
	path := r.opts.DiskPath
	if path == "" {
		root, err := r.snapshotterRoot(ctx)
		if err != nil {
			return runtime.DiskSpace{}, fmt.Errorf("disk space: %w", err)
		}
		path = root
	}
	ds, err := runtime.StatFS(path)
	if err != nil {
		return runtime.DiskSpace{}, fmt.Errorf("disk space: %w", err)
	}
	return ds, nil
}

// snapshotterRoot asks containerd where the snapshotter keeps its data.
func (r *Runtime) snapshotterRoot(ctx context.Context) (string, error) {
	filter := fmt.Sprintf(`type==%q,id==%q`, plugin.SnapshotPlugin, r.opts.Snapshotter)
	resp, err := r.client.IntrospectionService().Plugins(r.nsCtx(ctx), []string{filter})
	if err != nil {
		return "", fmt.Errorf("list plugins: %w", err)
	}
	for _, p := range resp.Plugins {
		if root := p.Exports[plugin.SnapshotterRootDir]; root != "" {
			return root, nil
		}
	}
	return "", fmt.Errorf("snapshotter %q reports no root directory: %w", r.opts.Snapshotter, errdefs.ErrNotFound)
}
