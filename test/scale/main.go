// Command scale is Fleet's performance suite: it measures the hub with N
// hollow agents (the real edge agent over real MQTT, with a fake container
// runtime) against the raw MQTT floor of the same broker.
//
//	go run ./test/scale -agents 1000 -broker embedded -runtime-latency 65ms
//	go run ./test/scale -agents 1000 -broker mosquitto -json
//	go run ./test/scale -agents 10000 -markdown BENCHMARKS.md
//
// Phases, each bounded by a deadline:
//
//	floor          B1: a bare MQTT publisher sends N retained desired states
//	               (the hub's size) through a broker started like the hub's,
//	               N bare clients answer each with a status
//	converge       B2: apply a Deployment targeting all N devices; time from
//	               the hub's acknowledgement to each device's converged
//	               status; ratio = converge wall / floor wall
//	hub-memory     B6: (hub RSS with N converged − RSS of the empty hub) / N
//	single-change  B7: change one device's deployment K times; apply to
//	               converged, each time
//	storm          B4: restart the hub (and Mosquitto) under N converged
//	               agents; time until every agent reported again, converged;
//	               lost devices; container starts caused by the storm. The
//	               agents reconnect with their jittered backoff, or with
//	               -reconnect-at-once all at the same instants
//	flood          issue 45 (opt-in, embedded broker): one extra device
//	               publishes at 10× its publish limit for -flood-window
//	               while the single-change probe goes on changing; the
//	               broker must cut the flooder off (when, how often, what
//	               it accepted) and nothing else may reconnect
//	rollout        issue 28: a Staged rollout of v1, then of a v2 that one
//	               device in 10 cannot pull; it must stop at the failure
//	               threshold (5 %) with no more devices on v2 than the
//	               steps so far allow, roll back, and every device must
//	               report v1 ready again; reports the devices that ever ran
//	               v2, the step it stopped at, the time from the first
//	               failure to RolledBack and from then to all on v1
//
// "go run ./test/scale summary -dir dist/bench" prints make bench's
// headline from the runs' -json-file output (summary.go).
//
// The hub (cmd/fleet-hub, built from this tree), the hollow agents, the
// floor broker and Mosquitto each run in their own process; the
// simulator and the floor are this binary re-executed with a role
// (hollow, floor, hub) as first argument.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

// run plays the role named by the environment (a re-executed copy), or runs
// the suite.
func run(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if role := os.Getenv(roleEnv); role != "" {
		if len(args) == 0 || args[0] != role {
			return fmt.Errorf("role %q: want it as the first argument", role)
		}
		switch role {
		case "hollow":
			return runHollowRole(ctx, args[1:])
		case "floor":
			return runFloorRole(ctx, args[1:])
		case "hub":
			return runHubRole(ctx, args[1:])
		}
		return fmt.Errorf("unknown role %q", role)
	}
	if len(args) > 0 && args[0] == "summary" {
		return runSummary(args[1:], os.Stdout) // summary.go: make bench's headline
	}
	return runSuite(ctx, args, os.Stdout)
}
