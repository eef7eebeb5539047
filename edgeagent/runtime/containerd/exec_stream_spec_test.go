package containerd

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/fleetmq/fleet/edgeagent/runtime"
)

// TestStreamProcessSpec: an exec process runs the command with the
// container's process spec, a terminal only when asked, and never
// writes into the container's spec.
func TestStreamProcessSpec(t *testing.T) {
	base := specs.Process{
		Args: []string{"/app", "serve"}, Env: make([]string, 1, 4), Cwd: "/srv",
		Terminal: true, ConsoleSize: &specs.Box{Width: 1, Height: 1},
	}
	base.Env[0] = "PATH=/bin"
	tests := []struct {
		name string
		o    runtime.ExecStreamOptions
		term bool
		size *specs.Box
		env  []string
	}{
		{name: "no tty", o: runtime.ExecStreamOptions{Cmd: []string{"sh"}}, env: []string{"PATH=/bin"}},
		{name: "tty", o: runtime.ExecStreamOptions{Cmd: []string{"sh"}, TTY: true}, term: true, env: []string{"PATH=/bin", "TERM=xterm"}},
		{
			name: "tty with a size", o: runtime.ExecStreamOptions{Cmd: []string{"sh"}, TTY: true, Size: &runtime.TermSize{Cols: 80, Rows: 24}},
			term: true, size: &specs.Box{Width: 80, Height: 24}, env: []string{"PATH=/bin", "TERM=xterm"},
		},
		{name: "a size without tty", o: runtime.ExecStreamOptions{Cmd: []string{"sh"}, Size: &runtime.TermSize{Cols: 80, Rows: 24}}, env: []string{"PATH=/bin"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := streamProcessSpec(base, tt.o)
			if !slices.Equal(p.Args, tt.o.Cmd) || p.Cwd != "/srv" || p.Terminal != tt.term || !slices.Equal(p.Env, tt.env) {
				t.Errorf("spec = %+v", p)
			}
			if (p.ConsoleSize == nil) != (tt.size == nil) || p.ConsoleSize != nil && *p.ConsoleSize != *tt.size {
				t.Errorf("console size = %+v, want %+v", p.ConsoleSize, tt.size)
			}
			p.Args[0] = "changed"
			if tt.o.Cmd[0] != "sh" {
				t.Error("Args shares the command's slice")
			}
			if base.Env[:cap(base.Env)][1] != "" || base.Args[0] != "/app" || *base.ConsoleSize != (specs.Box{Width: 1, Height: 1}) {
				t.Errorf("the container's spec changed: %+v", base)
			}
		})
	}
}
