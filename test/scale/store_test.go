package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"testing"
	"time"
)

// TestStoreEtcd runs the converge, hub-memory and storm phases with the
// hub's store on a real 3-member etcd cluster the suite starts
// (-store etcd): every device converges, the storm loses none, and the
// cluster is gone afterwards.
func TestStoreEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	o := smokeOptions(t, "embedded")
	o.Store = "etcd"
	o.Phases = []string{phaseConverge, phaseMemory, phaseStorm}
	results, err := runOnce(ctx, o, log)
	if err != nil {
		t.Fatalf("run: %v\nprogress:\n%s", err, logs.String())
	}
	for _, r := range results {
		if r.Error != "" || (r.Name != phaseMemory && (r.Samples != o.Agents || r.Lost != 0)) {
			t.Errorf("%s: error %q, %d samples of %d, lost %d", r.Name, r.Error, r.Samples, o.Agents, r.Lost)
		}
	}
	if len(results) != 3 {
		t.Errorf("%d results, want converge, hub-memory and storm: %+v", len(results), results)
	}
}

func TestParseStoreOption(t *testing.T) {
	o, err := parseOptions([]string{"-store", "etcd"}, os.Stderr)
	if err != nil || o.Store != "etcd" {
		t.Fatalf("-store etcd: %q, %v", o.Store, err)
	}
	if o, err := parseOptions(nil, os.Stderr); err != nil || o.Store != "badger" {
		t.Fatalf("default -store: %q, %v", o.Store, err)
	}
	for _, bad := range [][]string{{"-store", "bolt"}, {"-store", "etcd", "-profile", t.TempDir()}} {
		var sink bytes.Buffer
		if _, err := parseOptions(bad, &sink); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
