package containerd

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/containers"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

func TestObserve(t *testing.T) {
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	finished := started.Add(time.Minute)
	base := map[string]string{
		runtime.LabelManaged: "true", runtime.LabelPod: "p", runtime.LabelContainer: "c",
		runtime.LabelPodHash: "h", labelImage: "nginx", labelLogPath: "/x.log", "user": "u",
	}
	with := func(kv ...string) map[string]string {
		l := map[string]string{}
		for k, v := range base {
			l[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			l[kv[i]] = kv[i+1]
		}
		return l
	}
	tests := []struct {
		name   string
		labels map[string]string
		task   *tasktypes.Process
		want   runtime.Container
	}{
		{
			name:   "never started",
			labels: with(),
			want:   runtime.Container{State: runtime.StateCreated},
		},
		{
			name:   "running",
			labels: with(labelStartedAt, started.Format(time.RFC3339Nano)),
			task:   &tasktypes.Process{Status: tasktypes.Status_RUNNING},
			want:   runtime.Container{State: runtime.StateRunning, StartedAt: started},
		},
		{
			name:   "exited, task kept",
			labels: with(labelStartedAt, started.Format(time.RFC3339Nano)),
			task:   &tasktypes.Process{Status: tasktypes.Status_STOPPED, ExitStatus: 3, ExitedAt: timestamppb.New(finished)},
			want:   runtime.Container{State: runtime.StateExited, ExitCode: 3, StartedAt: started, FinishedAt: finished},
		},
		{
			name: "stopped, task deleted",
			labels: with(labelStartedAt, started.Format(time.RFC3339Nano),
				labelExitCode, "137", labelFinishedAt, finished.Format(time.RFC3339Nano)),
			want: runtime.Container{State: runtime.StateExited, ExitCode: 137, StartedAt: started, FinishedAt: finished},
		},
		{
			name:   "task vanished (daemon restart)",
			labels: with(labelStartedAt, started.Format(time.RFC3339Nano)),
			want:   runtime.Container{State: runtime.StateExited, ExitCode: 255, StartedAt: started},
		},
		{
			name:   "task created, never started",
			labels: with(),
			task:   &tasktypes.Process{Status: tasktypes.Status_CREATED},
			want:   runtime.Container{State: runtime.StateCreated},
		},
		{
			name:   "unknown",
			labels: with(),
			task:   &tasktypes.Process{Status: tasktypes.Status_UNKNOWN},
			want:   runtime.Container{State: runtime.StateUnknown},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := observe(containers.Container{ID: "id", Image: "docker.io/library/nginx:latest", Labels: tc.labels}, tc.task)
			if got.ID != "id" || got.Pod != "p" || got.Name != "c" || got.PodHash != "h" || got.Image != "nginx" {
				t.Errorf("identity: %+v", got)
			}
			for k := range got.Labels {
				if strings.HasPrefix(k, internalPrefix) {
					t.Errorf("internal label %s listed", k)
				}
			}
			if got.Labels["user"] != "u" || got.Labels[runtime.LabelManaged] != "true" {
				t.Errorf("labels %v", got.Labels)
			}
			if got.State != tc.want.State || got.ExitCode != tc.want.ExitCode ||
				!got.StartedAt.Equal(tc.want.StartedAt) || !got.FinishedAt.Equal(tc.want.FinishedAt) {
				t.Errorf("got %s/%d %v–%v, want %s/%d %v–%v", got.State, got.ExitCode, got.StartedAt, got.FinishedAt,
					tc.want.State, tc.want.ExitCode, tc.want.StartedAt, tc.want.FinishedAt)
			}
		})
	}
}

func TestContainerLabels(t *testing.T) {
	l := containerLabels(runtime.ContainerSpec{
		Pod: "p", Name: "c", PodHash: "h", Image: "nginx", LogPath: "/l",
		Labels: map[string]string{runtime.LabelPod: "spoofed", labelExitCode: "9", "x": "y"},
	})
	want := map[string]string{
		runtime.LabelManaged: "true", runtime.LabelPod: "p", runtime.LabelContainer: "c",
		runtime.LabelPodHash: "h", labelImage: "nginx", labelLogPath: "/l", "x": "y",
	}
	if len(l) != len(want) {
		t.Errorf("labels %v, want %v", l, want)
	}
	for k, v := range want {
		if l[k] != v {
			t.Errorf("%s = %q, want %q", k, l[k], v)
		}
	}
}

func TestCheckSpecRejects(t *testing.T) {
	r := &Runtime{hostname: "h"}
	dir := t.TempDir()
	tests := []struct {
		name   string
		mod    func(*runtime.ContainerSpec)
		target error
	}{
		{"missing host path", func(s *runtime.ContainerSpec) {
			s.Mounts = []schema.Mount{{HostPath: dir + "/nope", MountPath: "/m"}}
		}, fs.ErrNotExist},
		{"relative mount path", func(s *runtime.ContainerSpec) {
			s.Mounts = []schema.Mount{{HostPath: dir, MountPath: "m"}}
		}, nil},
		{"relative host path", func(s *runtime.ContainerSpec) {
			s.Mounts = []schema.Mount{{HostPath: "tmp", MountPath: "/m"}}
		}, nil},
		{"bad env", func(s *runtime.ContainerSpec) { s.Env = []string{"NOEQUALS"} }, nil},
		{"relative workdir", func(s *runtime.ContainerSpec) { s.WorkingDir = "tmp" }, nil},
		{"relative log path", func(s *runtime.ContainerSpec) { s.LogPath = "x.log" }, nil},
		{"negative memory", func(s *runtime.ContainerSpec) { s.MemoryLimitBytes = -1 }, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := runtime.ContainerSpec{ID: "x", Image: "i"}
			tc.mod(&s)
			_, err := r.checkSpec(s)
			if err == nil {
				t.Fatal("accepted")
			}
			if tc.target != nil && !errors.Is(err, tc.target) {
				t.Errorf("%v does not wrap %v", err, tc.target)
			}
		})
	}
	ok := runtime.ContainerSpec{ID: "x", Image: "i", Env: []string{"A=", "B=c=d"}, WorkingDir: "/w",
		Mounts: []schema.Mount{{HostPath: dir, MountPath: "/m", ReadOnly: true}}, MemoryLimitBytes: 1 << 20, CPUMillis: 1500}
	if _, err := r.checkSpec(ok); err != nil {
		t.Errorf("valid spec rejected: %v", err)
	}
}

func TestNormalizeRef(t *testing.T) {
	for in, want := range map[string]string{
		"nginx":                       "docker.io/library/nginx:latest",
		"nginx:1.25":                  "docker.io/library/nginx:1.25",
		"fleet.test/app:v1":           "fleet.test/app:v1",
		"localhost:5000/a/b":          "localhost:5000/a/b:latest",
		"ghcr.io/x/y@sha256:" + hex64: "ghcr.io/x/y@sha256:" + hex64,
	} {
		got, err := normalizeRef(in)
		if err != nil || got != want {
			t.Errorf("normalizeRef(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := normalizeRef("no spaces allowed"); err == nil {
		t.Error("invalid reference accepted")
	}
}

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
