package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestFloodPhase runs the flood phase with 20 hollow agents against a
// real fleet-hub on its embedded broker: the flooder must be cut off (the
// hub counting it), about when its burst runs out, the probe must keep
// converging, and nothing else may reconnect.
func TestFloodPhase(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fleet-hub and a simulator process")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	o := smokeOptions(t, "embedded")
	// Past the first cut-off (3.3 s at the default limit) and one
	// reconnect a second later.
	o.Phases, o.FloodWindow, o.Changes = []string{phaseConverge, phaseFlood}, 6*time.Second, 100
	results, err := runOnce(ctx, o, log)
	var table strings.Builder
	_ = writeTable(&table, results)
	t.Logf("results:\n%s", table.String())
	if err != nil {
		t.Fatalf("run: %v\nprogress:\n%s", err, logs.String())
	}
	if len(results) != 2 || results[1].Name != phaseFlood || results[1].Flood == nil {
		t.Fatalf("results %+v: want converge, then flood with its figures", results)
	}
	r := results[1]
	f := r.Flood
	if !r.OK || f.CutOffs < 1 || f.HubCutOffs < 1 || f.FleetOnlineMsgs != 0 {
		t.Errorf("flood: ok %v, %d cut-offs (hub %v), fleet online messages %v: want the flooder cut off and nothing else reconnecting", r.OK, f.CutOffs, f.HubCutOffs, f.FleetOnlineMsgs)
	}
	if f.Connects < 2 || f.CutOffs > f.Connects {
		t.Errorf("flood: %d connections, %d cut-offs: want it back after the first cut-off, and cut off at most once a connection", f.Connects, f.CutOffs)
	}
	// The bucket lets through its burst and its refill, never the flood.
	if f.AckedBeforeCutOff < int64(f.LimitBurst) || float64(f.AckedBeforeCutOff) > f.LimitBurst+f.LimitPerSecond*f.FirstCutOffMS/1000+50 {
		t.Errorf("flood: %d publishes accepted before the cut-off at %v ms: want the burst (%v) plus %v/s", f.AckedBeforeCutOff, f.FirstCutOffMS, f.LimitBurst, f.LimitPerSecond)
	}
	if f.Sent <= f.Acked || r.Samples == 0 || f.ProbeChanges != r.Samples {
		t.Errorf("flood: sent %d, acked %d, probe %d changes (%d samples): want more sent than accepted and the probe changing", f.Sent, f.Acked, f.ProbeChanges, r.Samples)
	}
}

func TestFloodNeedsEmbedded(t *testing.T) {
	for _, args := range [][]string{
		{"-broker", "mosquitto", "-phases", "converge,flood"},
		{"-phases", "flood", "-flood-window", "0"},
	} {
		if _, err := parseOptions(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	o, err := parseOptions([]string{"-phases", "floor,converge,hub-memory,single-change,storm,rollout,flood"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if p := partialPhases(o); p != "" {
		t.Errorf("make bench's run with the flood: partial phases %q, want the full run's block", p)
	}
}
