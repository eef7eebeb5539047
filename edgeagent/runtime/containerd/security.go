package containerd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"github.com/containerd/containerd/containers"
	"github.com/containerd/containerd/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/fleetmq/fleet/edgeagent/runtime"
)

// securityOpts returns the spec options for a container's hardware access
// and privileges: devices, privileged mode, capabilities, user and group,
// a read-only root. They are applied after the image's configuration, so
// they override its user.
func securityOpts(spec runtime.ContainerSpec) ([]oci.SpecOpts, error) {
	var opts []oci.SpecOpts
	if spec.Privileged {
		// As docker run --privileged: every capability, no masked or
		// read-only paths, no seccomp, every host device, all allowed.
		opts = append(opts, oci.WithPrivileged, oci.WithAllDevicesAllowed, oci.WithHostDevices)
	}
	for _, d := range spec.Devices {
		dev, err := hostDevice(d)
		if err != nil {
			return nil, err
		}
		opts = append(opts, withDevice(dev, d.Permissions))
	}
	if len(spec.CapDrop) > 0 || len(spec.CapAdd) > 0 {
		drop, dropAll, err := capNames(spec.CapDrop, true)
		if err != nil {
			return nil, fmt.Errorf("capabilities drop: %w", err)
		}
		add, _, err := capNames(spec.CapAdd, false)
		if err != nil {
			return nil, fmt.Errorf("capabilities add: %w", err)
		}
		if dropAll {
			opts = append(opts, oci.WithCapabilities(nil))
		} else if len(drop) > 0 {
			opts = append(opts, oci.WithDroppedCapabilities(drop))
		}
		if len(add) > 0 {
			opts = append(opts, oci.WithAddedCapabilities(add))
		}
	}
	uid, err := checkID("runAsUser", spec.RunAsUser)
	if err != nil {
		return nil, err
	}
	gid, err := checkID("runAsGroup", spec.RunAsGroup)
	if err != nil {
		return nil, err
	}
	switch {
	case uid != nil && gid != nil:
		opts = append(opts, oci.WithUIDGID(*uid, *gid))
	case uid != nil:
		// The group is the user's in the image's /etc/passwd, else 0.
		opts = append(opts, oci.WithUserID(*uid))
	case gid != nil:
		opts = append(opts, withGID(*gid))
	}
	if spec.ReadOnlyRootFS {
		opts = append(opts, oci.WithRootFSReadonly())
	}
	return opts, nil
}

// hostDevice looks a device node up on the host, following a symbolic
// link (/dev/serial/by-id/…), and returns it with its container path.
func hostDevice(d runtime.Device) (specs.LinuxDevice, error) {
	if !filepath.IsAbs(d.HostPath) {
		return specs.LinuxDevice{}, fmt.Errorf("device %q: host path is not absolute", d.HostPath)
	}
	target := d.ContainerPath
	if target == "" {
		target = d.HostPath
	}
	if !filepath.IsAbs(target) {
		return specs.LinuxDevice{}, fmt.Errorf("device %s: container path %q is not absolute", d.HostPath, target)
	}
	if strings.Trim(d.Permissions, "rwm") != "" {
		return specs.LinuxDevice{}, fmt.Errorf("device %s: permissions %q: want some of r, w and m", d.HostPath, d.Permissions)
	}
	real, err := filepath.EvalSymlinks(d.HostPath)
	if err != nil {
		return specs.LinuxDevice{}, fmt.Errorf("device %s: %w", d.HostPath, err)
	}
	dev, err := oci.DeviceFromPath(real)
	if errors.Is(err, oci.ErrNotADevice) {
		return specs.LinuxDevice{}, fmt.Errorf("device %s: not a device node", d.HostPath)
	}
	if err != nil {
		return specs.LinuxDevice{}, fmt.Errorf("device %s: %w", d.HostPath, err)
	}
	dev.Path = target
	return *dev, nil
}

// withDevice creates the node in the container and lets the device
// cgroup allow it with the given permissions (default rwm).
func withDevice(dev specs.LinuxDevice, permissions string) oci.SpecOpts {
	if permissions == "" {
		permissions = "rwm"
	}
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Linux == nil {
			s.Linux = &specs.Linux{}
		}
		if s.Linux.Resources == nil {
			s.Linux.Resources = &specs.LinuxResources{}
		}
		devices := s.Linux.Devices[:0:0]
		for _, d := range s.Linux.Devices {
			if d.Path != dev.Path { // privileged mode lists host devices already
				devices = append(devices, d)
			}
		}
		s.Linux.Devices = append(devices, dev)
		major, minor := dev.Major, dev.Minor
		s.Linux.Resources.Devices = append(s.Linux.Resources.Devices, specs.LinuxDeviceCgroup{
			Allow: true, Type: dev.Type, Major: &major, Minor: &minor, Access: permissions,
		})
		return nil
	}
}

// withGID sets the process's group, keeping the image's user.
func withGID(gid uint32) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Process == nil {
			s.Process = &specs.Process{}
		}
		s.Process.User.GID = gid
		return nil
	}
}

// capNames normalises capability names to CAP_X; all reports "ALL"
// (allowed only where allowAll).
func capNames(in []string, allowAll bool) (out []string, all bool, err error) {
	for _, c := range in {
		n := strings.ToUpper(strings.TrimSpace(c))
		if n == "ALL" {
			if !allowAll {
				return nil, false, errors.New("ALL is only for drop")
			}
			all = true
			continue
		}
		if !strings.HasPrefix(n, "CAP_") {
			n = "CAP_" + n
		}
		if len(n) <= len("CAP_") || strings.Trim(n[len("CAP_"):], "ABCDEFGHIJKLMNOPQRSTUVWXYZ_") != "" {
			return nil, false, fmt.Errorf("%q is not a capability name", c)
		}
		out = append(out, n)
	}
	return out, all, nil
}

// checkID checks a user or group ID: 0 to 2^31-1, runc's limit.
func checkID(what string, id *int64) (*uint32, error) {
	if id == nil {
		return nil, nil
	}
	if *id < 0 || *id > math.MaxInt32 {
		return nil, fmt.Errorf("%s %d: must be from 0 to %d", what, *id, math.MaxInt32)
	}
	v := uint32(*id)
	return &v, nil
}
