package main

import (
	"log/slog"
	"os"
	"strings"
	"testing"
)

// TestLogFlags: the log limits come from flags, FLEET_AGENT_ env and the
// config file (where the count may be a bare number), and bad ones are
// refused with the flag's name.
func TestLogFlags(t *testing.T) {
	c, err := parse(t, "--device", "pi")
	if err != nil {
		t.Fatal(err)
	}
	if size, files, err := c.logLimits(); size != 10<<20 || files != 1 || err != nil {
		t.Errorf("defaults: %d, %d, %v; want 10 MiB, 1", size, files, err)
	}
	if c, err = parse(t, "--device", "pi", "--log-max-size", "1Mi", "--log-max-files", "3"); err != nil {
		t.Fatal(err)
	}
	if size, files, _ := c.logLimits(); size != 1<<20 || files != 3 {
		t.Errorf("flags: %d, %d", size, files)
	}
	file := writeFile(t, "agent.yaml", "device: pi\nlog-max-size: 2Mi\nlog-max-files: 4\nlog-writer: /usr/local/bin/fleet-agent\n")
	if c, err = parse(t, "--config", file); err != nil {
		t.Fatal(err)
	}
	if size, files, _ := c.logLimits(); size != 2<<20 || files != 4 || c.LogWriter != "/usr/local/bin/fleet-agent" {
		t.Errorf("config file: %d, %d, %q", size, files, c.LogWriter)
	}
	t.Setenv("FLEET_AGENT_LOG_MAX_FILES", "5")
	if c, err = parse(t, "--config", file); err != nil {
		t.Fatal(err)
	}
	if _, files, _ := c.logLimits(); files != 5 {
		t.Errorf("env: %d files, want 5", files)
	}
	os.Unsetenv("FLEET_AGENT_LOG_MAX_FILES")

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--log-max-size", "lots"}, "--log-max-size"},
		{[]string{"--log-max-size", "1Ki"}, "--log-max-size"},
		{[]string{"--log-max-files", "0"}, "--log-max-files"},
		{[]string{"--log-writer", "fleet-agent"}, "--log-writer"},
	} {
		_, err := parse(t, append([]string{"--device", "pi"}, tt.args...)...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parse(%v) = %v, want an error naming %s", tt.args, err, tt.want)
		}
	}

	log := slog.New(slog.DiscardHandler)
	exe, _ := os.Executable()
	for arg, want := range map[string]string{"": exe, "off": "", "/opt/fleet-agent": "/opt/fleet-agent"} {
		c.LogWriter = arg
		if got := c.logWriter(log); got != want {
			t.Errorf("--log-writer %q: runtime gets %q, want %q", arg, got, want)
		}
	}
}

func TestLogWriterCmdArgs(t *testing.T) {
	for _, args := range [][]string{
		{"log-writer"},                         // neither form
		{"log-writer", "path=relative.log"},    // bad options
		{"log-writer", "--path", "/x", "spec"}, // both
		{"log-writer", "--path", "/x", "--max-size", "1Ki"},
	} {
		var out strings.Builder
		if err := run(args, &out, &out); err == nil {
			t.Errorf("run(%v) succeeded", args)
		}
	}
}
