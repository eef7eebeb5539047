package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// destination is where the index goes: a registry, a layout or a tarball.
type destination interface {
	// setVersion completes the image name with the version where the
	// user left it to the default; it fails before anything is written.
	setVersion(version string) error
	write(ctx context.Context, idx v1.ImageIndex, stdout io.Writer) error
	// image is the reference an AgentRollout's spec.image names.
	image() string
	// next tells what to do before the rollout, or "".
	next() string
}

// destinationFor checks the output flags before any file is read.
func destinationFor(o options) (destination, error) {
	if o.push != "" {
		var opts []name.Option
		if o.insecure {
			opts = append(opts, name.Insecure)
		}
		tag, err := name.NewTag(o.push, append(opts, name.StrictValidation)...)
		if err != nil {
			return nil, usagef("--push %q: want REGISTRY/REPO:TAG, such as registry.example.com/fleet/agent:v1.4.0: %v", o.push, err)
		}
		return &pushDest{tag: tag}, nil
	}
	fd := &fileDest{dir: o.ociLayout, tarFile: o.output, name: o.name}
	if fd.dir != "" {
		if err := checkEmptyDir(fd.dir); err != nil {
			return nil, err
		}
	} else if st, err := os.Stat(filepath.Dir(fd.tarFile)); err != nil || !st.IsDir() {
		return nil, usagef("-o %s: directory %s does not exist", fd.tarFile, filepath.Dir(fd.tarFile))
	}
	return fd, nil
}

func checkEmptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return usagef("--oci-layout %s: %v", dir, err)
	}
	if len(ents) > 0 {
		return usagef("--oci-layout %s: not empty: give a new or empty directory", dir)
	}
	return nil
}

// pushDest pushes to a registry with the docker config's credentials.
type pushDest struct {
	tag    name.Tag
	pushed string
}

func (p *pushDest) setVersion(string) error { return nil }
func (p *pushDest) image() string           { return p.tag.String() }
func (p *pushDest) next() string            { return "" }

func (p *pushDest) write(ctx context.Context, idx v1.ImageIndex, stdout io.Writer) error {
	d, err := idx.Digest()
	if err != nil {
		return fmt.Errorf("index digest: %w", err)
	}
	fmt.Fprintf(stdout, "pushing %s (index %s) ...\n", p.tag, d)
	updates := make(chan v1.Update, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := -1
		for u := range updates {
			if u.Total <= 0 {
				continue
			}
			pct := int(u.Complete * 100 / u.Total)
			if pct/20 != last/20 || (pct == 100 && last != 100) {
				fmt.Fprintf(stdout, "  %3d%% of %.1f MiB\n", pct, float64(u.Total)/(1<<20))
				last = pct
			}
		}
	}()
	err = remote.WriteIndex(p.tag, idx,
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithProgress(updates))
	<-done
	if err != nil {
		return fmt.Errorf("push %s: %w", p.tag, err)
	}
	p.pushed = p.tag.Context().Digest(d.String()).String()
	fmt.Fprintf(stdout, "pushed %s\n", p.pushed)
	return nil
}

// fileDest writes an OCI image layout, into dir or as the tarball tarFile.
type fileDest struct {
	dir, tarFile, name string
	tag                name.Tag
}

func (f *fileDest) setVersion(version string) error {
	n := f.name
	if n == "" {
		n = "docker.io/fleetmq/fleet-agent:" + version
	}
	tag, err := name.NewTag(n, name.StrictValidation)
	if err != nil {
		return usagef("--name %q: want REGISTRY/REPO:TAG, such as registry.example.com/fleet/agent:v1.4.0: %v", n, err)
	}
	f.tag = tag
	return nil
}

func (f *fileDest) image() string { return f.tag.String() }

func (f *fileDest) next() string {
	if f.tarFile == "" {
		return fmt.Sprintf("Devices pull %s: copy the layout %s to that registry first (crane push, skopeo copy --all oci:%s)", f.tag, f.dir, f.dir)
	}
	return fmt.Sprintf("Devices pull %s: push %s to that registry first (crane push, skopeo copy --all), or import it on each device: ctr -n fleet images import --all-platforms %s", f.tag, f.tarFile, filepath.Base(f.tarFile))
}

func (f *fileDest) write(_ context.Context, idx v1.ImageIndex, stdout io.Writer) error {
	if f.tarFile == "" {
		if err := writeLayout(f.dir, idx, f.tag); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote OCI image layout %s (%s)\n", f.dir, f.tag)
		return nil
	}
	tmp, err := os.MkdirTemp(filepath.Dir(f.tarFile), ".agentimage-")
	if err != nil {
		return fmt.Errorf("-o %s: %w", f.tarFile, err)
	}
	defer os.RemoveAll(tmp)
	if err := writeLayout(tmp, idx, f.tag); err != nil {
		return err
	}
	part := f.tarFile + ".part"
	if err := tarDir(tmp, part); err != nil {
		os.Remove(part)
		return fmt.Errorf("-o %s: %w", f.tarFile, err)
	}
	if err := os.Rename(part, f.tarFile); err != nil {
		os.Remove(part)
		return fmt.Errorf("-o %s: %w", f.tarFile, err)
	}
	st, err := os.Stat(f.tarFile)
	if err != nil {
		return fmt.Errorf("-o %s: %w", f.tarFile, err)
	}
	fmt.Fprintf(stdout, "wrote %s (%s, %.1f MiB)\n", f.tarFile, f.tag, float64(st.Size())/(1<<20))
	return nil
}

// writeLayout writes idx into the OCI layout dir, named tag: containerd's
// import takes the name from io.containerd.image.name.
func writeLayout(dir string, idx v1.ImageIndex, tag name.Tag) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("--oci-layout %s: %w", dir, err)
	}
	err = p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.TagStr(),
		"io.containerd.image.name":          tag.String(),
	}))
	if err != nil {
		return fmt.Errorf("--oci-layout %s: %w", dir, err)
	}
	return nil
}

// tarDir writes the files under dir into the tar file out, names relative
// to dir, in a stable order.
func tarDir(dir, out string) error {
	fh, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(fh)
	walkErr := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name, hdr.Mode = filepath.ToSlash(rel), 0o644
		if d.IsDir() {
			hdr.Name, hdr.Mode = hdr.Name+"/", 0o755
		}
		hdr.ModTime, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = epoch, 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err := errors.Join(walkErr, tw.Close()); err != nil {
		fh.Close()
		return err
	}
	if err := fh.Sync(); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

// printSummary prints per platform the binary's SHA-256 and the command
// that rolls the release out.
func printSummary(stdout io.Writer, dst destination, version string, plan []*build) error {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PLATFORM\tARCH\tBUILD\tBYTES\tPULLED\tSHA-256 OF /fleet-agent")
	for _, b := range plan {
		for _, p := range b.platforms {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", platformString(p), b.goarch, b.file, len(b.data), b.layerSize, b.digest)
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	var hasArm, armV6 bool
	for _, b := range plan {
		for _, p := range b.platforms {
			hasArm = hasArm || p.Architecture == "arm"
			armV6 = armV6 || p.Variant == "v6"
		}
	}
	if hasArm && !armV6 {
		fmt.Fprintln(stdout, "note: the image has no linux/arm/v6: ARMv6 devices (Pi Zero, Pi 1) cannot take this release")
	}
	if n := dst.next(); n != "" {
		fmt.Fprintln(stdout, n)
	}
	fmt.Fprintln(stdout, "Roll it out (the signed desired state names these digests; arm covers armv7 and armv6):")
	fmt.Fprintln(stdout, "  "+upgradeLine(dst.image(), version, plan))
	return nil
}

// upgradeLine is the `fleet agent upgrade` command for the image.
func upgradeLine(image, version string, plan []*build) string {
	parts := []string{"fleet agent upgrade --to " + version, "--image " + image}
	for _, b := range plan {
		parts = append(parts, "--digest "+b.goarch+"="+b.digest)
	}
	return strings.Join(parts, " ")
}
