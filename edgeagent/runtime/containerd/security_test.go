package containerd

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/containers"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/containerd/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/fleetmq/fleet/edgeagent/runtime"
)

// applySecurity applies securityOpts of spec to containerd's default
// spec.
func applySecurity(t *testing.T, spec runtime.ContainerSpec) (*oci.Spec, error) {
	t.Helper()
	opts, err := securityOpts(spec)
	if err != nil {
		return nil, err
	}
	ctx := namespaces.WithNamespace(context.Background(), "test")
	c := &containers.Container{ID: "c"}
	s, err := oci.GenerateSpec(ctx, nil, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range opts {
		if err := o(ctx, nil, c, s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func TestSecurityOpts(t *testing.T) {
	uid, gid := int64(1000), int64(20)
	s, err := applySecurity(t, runtime.ContainerSpec{
		Devices:        []runtime.Device{{HostPath: "/dev/null", ContainerPath: "/dev/sensor0", Permissions: "rw"}},
		CapDrop:        []string{"ALL"},
		CapAdd:         []string{"CAP_NET_ADMIN", "sys_rawio"},
		RunAsUser:      &uid,
		RunAsGroup:     &gid,
		ReadOnlyRootFS: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Process.Capabilities.Effective, []string{"CAP_NET_ADMIN", "CAP_SYS_RAWIO"}) ||
		!slices.Equal(s.Process.Capabilities.Bounding, []string{"CAP_NET_ADMIN", "CAP_SYS_RAWIO"}) {
		t.Errorf("capabilities %+v", s.Process.Capabilities)
	}
	if s.Process.User.UID != 1000 || s.Process.User.GID != 20 || !s.Root.Readonly {
		t.Errorf("user %+v, read-only root %v", s.Process.User, s.Root.Readonly)
	}
	i := slices.IndexFunc(s.Linux.Devices, func(d specs.LinuxDevice) bool { return d.Path == "/dev/sensor0" })
	if i < 0 || s.Linux.Devices[i].Type != "c" || s.Linux.Devices[i].Major != 1 || s.Linux.Devices[i].Minor != 3 {
		t.Fatalf("devices %+v", s.Linux.Devices)
	}
	last := s.Linux.Resources.Devices[len(s.Linux.Resources.Devices)-1]
	if !last.Allow || last.Type != "c" || *last.Major != 1 || *last.Minor != 3 || last.Access != "rw" {
		t.Errorf("cgroup rule %+v", last)
	}

	// Dropping one capability keeps the others.
	s, err = applySecurity(t, runtime.ContainerSpec{CapDrop: []string{"CAP_NET_RAW"}})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(s.Process.Capabilities.Effective, "CAP_NET_RAW") || !slices.Contains(s.Process.Capabilities.Effective, "CAP_CHOWN") {
		t.Errorf("drop NET_RAW: %v", s.Process.Capabilities.Effective)
	}

	// Privileged: every host device, all allowed, no masked path.
	s, err = applySecurity(t, runtime.ContainerSpec{Privileged: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Linux.Devices) < 3 || len(s.Linux.MaskedPaths) != 0 || !s.Linux.Resources.Devices[0].Allow || s.Linux.Resources.Devices[0].Access != "rwm" {
		t.Errorf("privileged: %d devices, masked %v, cgroup %+v", len(s.Linux.Devices), s.Linux.MaskedPaths, s.Linux.Resources.Devices)
	}
	// Group only: the image's user, that group.
	s, err = applySecurity(t, runtime.ContainerSpec{RunAsGroup: &gid})
	if err != nil || s.Process.User.GID != 20 || s.Process.User.UID != 0 {
		t.Errorf("group only: %+v %v", s.Process.User, err)
	}
}

func TestSecurityOptsRefuses(t *testing.T) {
	neg := int64(-1)
	for _, tc := range []struct {
		name string
		spec runtime.ContainerSpec
		want string
	}{
		{"missing device", runtime.ContainerSpec{Devices: []runtime.Device{{HostPath: "/dev/fleet-nonexistent"}}}, "/dev/fleet-nonexistent"},
		{"not a device", runtime.ContainerSpec{Devices: []runtime.Device{{HostPath: "/proc/self/exe"}}}, "not a device node"},
		{"bad permissions", runtime.ContainerSpec{Devices: []runtime.Device{{HostPath: "/dev/null", Permissions: "x"}}}, "permissions"},
		{"bad capability", runtime.ContainerSpec{CapAdd: []string{"CAP_NOPE!"}}, "not a capability"},
		{"ALL in add", runtime.ContainerSpec{CapAdd: []string{"ALL"}}, "only for drop"},
		{"negative uid", runtime.ContainerSpec{RunAsUser: &neg}, "runAsUser -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := applySecurity(t, tc.spec); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
