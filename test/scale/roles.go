package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	runtimepprof "runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/fleetmq/fleet/hub"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/scale/hollow"
)

// The simulator's garbage collector (see hollowMemoryLimit).
const (
	hollowHeapPerAgent = 400 << 10 // bytes of limit per agent
	hollowHeapBase     = 512 << 20
)

// hollowMemoryLimit is the simulator's memory limit for n agents: room for
// the garbage of a few fleet-wide changes, and at most a quarter of the
// machine's memory.
func hollowMemoryLimit(n int, machine int64) int64 {
	limit := hollowHeapBase + int64(n)*hollowHeapPerAgent
	if machine > 0 {
		limit = min(limit, machine/4)
	}
	return limit
}

// runHollowRole runs the hollow-agent simulator: `hollow -config FILE`.
func runHollowRole(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("hollow", flag.ContinueOnError)
	config := fs.String("config", "", "simulator config (JSON, holds tokens)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := hollow.LoadConfig(*config)
	if err != nil {
		return err
	}
	log := slog.New(slog.DiscardHandler)
	if lv := cfg.LogLevel; lv != "" && lv != "off" {
		var l slog.Level
		if err := l.UnmarshalText([]byte(lv)); err != nil {
			return fmt.Errorf("hollow: log level %q: %w", lv, err)
		}
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
	}
	// N agents share this process and its garbage collector, where real
	// ones each collect a small heap on a CPU of their own. Here every
	// collection scans the stacks of all N agents' goroutines (about ten
	// each) on the two cores the hub runs on: at 10,000 agents, with
	// GOGC=400, collection was still a fifth of the simulator's CPU in a
	// converge. So collect only when the heap reaches a memory limit sized
	// for N (GOGC or GOMEMLIMIT, if set, still win). The agents' code and
	// what it allocates are unchanged; BENCHMARKS.md says the agents' CPU
	// figures leave out most of their collection.
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetGCPercent(-1)
		limit := cfg.MemoryLimit
		if limit <= 0 {
			limit = hollowMemoryLimit(len(cfg.Devices), memTotal())
		}
		debug.SetMemoryLimit(limit)
	}
	// For profiling the agents' side: the whole life of the simulator.
	if path := os.Getenv("FLEET_SCALE_HOLLOW_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("hollow: %w", err)
		}
		if err := runtimepprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("hollow: %w", err)
		}
		defer func() {
			runtimepprof.StopCPUProfile()
			f.Close()
		}()
	}
	return hollow.Serve(ctx, cfg, os.Stdin, os.Stdout, log)
}

// runHubRole runs the hub in this process, as cmd/fleet-hub does, plus a
// profiling endpoint: the suite uses it with -profile, since fleet-hub has
// no --pprof-addr. Flags use fleet-hub's names.
func runHubRole(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("hub", flag.ContinueOnError)
	var o hub.Options
	var level, pprofAddr, pwFile, prefix, cpuprofile string
	fs.StringVar(&o.DataDir, "data-dir", hub.DefaultDataDir, "")
	fs.StringVar(&o.HTTPAddr, "http-addr", hub.DefaultHTTPAddr, "")
	fs.StringVar(&o.MQTTAddr, "mqtt-addr", hub.DefaultMQTTAddr, "")
	fs.StringVar(&o.Broker, "broker", "", "")
	fs.StringVar(&pwFile, "broker-password-file", "", "")
	fs.StringVar(&prefix, "topic-prefix", schema.DefaultTopicPrefix, "")
	fs.StringVar(&level, "log-level", "info", "")
	fs.StringVar(&pprofAddr, "pprof-addr", "", "serve /debug/pprof/ and /scale/cpu/{start,stop} here")
	fs.StringVar(&cpuprofile, "cpuprofile", "", "profile from the start into this file (until /scale/cpu/stop or exit)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("hub: --log-level: %w", err)
	}
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
	o.Topics = schema.Topics{Prefix: prefix}
	o.Version = "scale-hub"
	if pwFile != "" {
		b, err := os.ReadFile(pwFile)
		if err != nil {
			return fmt.Errorf("hub: %w", err)
		}
		o.BrokerPassword = strings.TrimSpace(string(b))
	}
	var first *os.File
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return fmt.Errorf("hub: %w", err)
		}
		if err := runtimepprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("hub: %w", err)
		}
		first = f
		defer func() {
			// Still running at exit: end it (a stopped one is a no-op).
			runtimepprof.StopCPUProfile()
			f.Close()
		}()
	}
	if pprofAddr != "" {
		// A profile started over HTTP and still running at exit (the
		// storm's stop) is written out too.
		defer runtimepprof.StopCPUProfile()
		ln, err := net.Listen("tcp", pprofAddr)
		if err != nil {
			return fmt.Errorf("hub: pprof: %w", err)
		}
		srv := &http.Server{Handler: profileMux(first), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
	}
	return hub.Run(ctx, o)
}

// profileMux serves net/http/pprof plus POST /scale/cpu/start?file=PATH and
// POST /scale/cpu/stop, so a CPU profile can bracket exactly one phase;
// running is a profile already started.
func profileMux(running *os.File) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	var mu sync.Mutex
	cur := running
	mux.HandleFunc("POST /scale/cpu/start", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if cur != nil {
			http.Error(w, "a profile is running", http.StatusConflict)
			return
		}
		f, err := os.Create(r.URL.Query().Get("file"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := runtimepprof.StartCPUProfile(f); err != nil {
			f.Close()
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		cur = f
	})
	mux.HandleFunc("POST /scale/cpu/stop", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if cur == nil {
			http.Error(w, "no profile is running", http.StatusConflict)
			return
		}
		runtimepprof.StopCPUProfile()
		err := cur.Close()
		cur = nil
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	return mux
}
