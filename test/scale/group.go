package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/fleetmq/fleet/test/scale/hollow"
)

// hollowGroup is one simulator split over several processes: a process
// holds one socket per device, and the process file limit here (20,000,
// not raisable) caps what one can hold. Device i of the config runs in
// the process whose slice holds it; their replies are put together in
// config order.
type hollowGroup struct {
	name     string
	children []*child
	sizes    []int // devices per child, in config order
}

// defaultAgentsPerProcess keeps a simulator process well under the file
// limit of 20,000 (sockets, state files, the runtime's own).
const defaultAgentsPerProcess = 12500

// startHollow starts a simulator for cfg, in as many processes as
// -agents-per-process asks, and waits until each has started every one
// of its devices.
func (s *suite) startHollow(ctx context.Context, name string, cfg hollow.Config) (*hollowGroup, error) {
	per := s.o.AgentsPerProcess
	if per <= 0 {
		per = defaultAgentsPerProcess
	}
	n := (len(cfg.Devices) + per - 1) / per
	g := &hollowGroup{name: name}
	seed := max(cfg.Seed, 1)
	// The whole simulator's memory limit, shared out by devices.
	total := hollowMemoryLimit(len(cfg.Devices), memTotal())
	for k := range n {
		part := cfg
		lo, hi := k*len(cfg.Devices)/n, (k+1)*len(cfg.Devices)/n
		part.Devices = cfg.Devices[lo:hi]
		// Agent i keeps the seed it has in one process.
		part.Seed = seed + uint64(lo)
		if cfg.ConnectRate > 0 {
			part.ConnectRate = max(1, cfg.ConnectRate/n)
		}
		part.FailDevices = inDevices(cfg.FailDevices, part.Devices)
		if n > 1 {
			part.MemoryLimit = total * int64(len(part.Devices)) / int64(len(cfg.Devices))
		}
		cname := name
		if n > 1 {
			cname = fmt.Sprintf("%s-%d", name, k)
		}
		path := filepath.Join(s.dir, cname+".json")
		if err := hollow.WriteConfig(path, part); err != nil {
			g.stop(5 * time.Second)
			return nil, err
		}
		c, err := startChild(cname, filepath.Join(s.dir, cname+".log"), "hollow", "-config", path)
		if err != nil {
			g.stop(5 * time.Second)
			return nil, err
		}
		g.children = append(g.children, c)
		g.sizes = append(g.sizes, len(part.Devices))
	}
	for _, c := range g.children {
		if err := c.await(ctx, "ready", nil); err != nil {
			g.stop(5 * time.Second)
			return nil, err
		}
	}
	return g, nil
}

// inDevices is the names of list that are among devices.
func inDevices(list []string, devices []hollow.Device) []string {
	if len(list) == 0 {
		return nil
	}
	have := make(map[string]bool, len(devices))
	for _, d := range devices {
		have[d.Name] = true
	}
	var out []string
	for _, name := range list {
		if have[name] {
			out = append(out, name)
		}
	}
	return out
}

// each calls f on every child at once and joins the errors.
func (g *hollowGroup) each(f func(i int, c *child) error) error {
	errs := make([]error, len(g.children))
	var wg sync.WaitGroup
	for i, c := range g.children {
		wg.Go(func() { errs[i] = f(i, c) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// callAll sends cmd to every child and awaits op from each.
func (g *hollowGroup) callAll(ctx context.Context, cmd hollow.Command, op string) error {
	return g.each(func(_ int, c *child) error { return c.call(ctx, cmd, op, nil) })
}

// stats sums the children's stats (RSS and goroutines too: the whole
// simulator).
func (g *hollowGroup) stats(ctx context.Context) (hollow.Stats, error) {
	parts := make([]hollow.Stats, len(g.children))
	err := g.each(func(i int, c *child) error {
		var r hollow.Reply
		if err := c.call(ctx, hollow.Command{Op: "stats"}, "stats", &r); err != nil {
			return err
		}
		if r.Stats == nil {
			return fmt.Errorf("%s: stats reply without stats", c.name)
		}
		parts[i] = *r.Stats
		return nil
	})
	var sum hollow.Stats
	for _, p := range parts {
		sum.Devices += p.Devices
		sum.Started += p.Started
		sum.Connected += p.Connected
		sum.Connects += p.Connects
		sum.Starts += p.Starts
		sum.Creates += p.Creates
		sum.Stops += p.Stops
		sum.Removes += p.Removes
		sum.Accepted += p.Accepted
		sum.Duplicate += p.Duplicate
		sum.Stale += p.Stale
		sum.Invalid += p.Invalid
		sum.FloorReceived += p.FloorReceived
		sum.FloorEchoed += p.FloorEchoed
		sum.FloorErrors += p.FloorErrors
		sum.Goroutines += p.Goroutines
		sum.RSSBytes += p.RSSBytes
	}
	return sum, err
}

// starts is when each device last started a container, in config order.
func (g *hollowGroup) starts(ctx context.Context) ([]int64, error) {
	parts := make([][]int64, len(g.children))
	err := g.each(func(i int, c *child) error {
		var r hollow.Reply
		if err := c.call(ctx, hollow.Command{Op: "starts"}, "starts", &r); err != nil {
			return err
		}
		if len(r.Starts) != g.sizes[i] {
			return fmt.Errorf("%s: %d start times for %d devices", c.name, len(r.Starts), g.sizes[i])
		}
		parts[i] = r.Starts
		return nil
	})
	var out []int64
	for _, p := range parts {
		out = append(out, p...)
	}
	return out, err
}

// cpu is the CPU time of every child, or -1 if one cannot be read.
func (g *hollowGroup) cpu() time.Duration {
	var sum time.Duration
	for _, c := range g.children {
		t := cpuTime(c.cmd.Process.Pid)
		if t < 0 {
			return -1
		}
		sum += t
	}
	return sum
}

// profile starts (name != "") or stops a CPU profile of every child, one
// file each (NAME.agents.cpu.pprof, NAME.agents-K.cpu.pprof).
func (g *hollowGroup) profile(ctx context.Context, dir, name string) error {
	return g.each(func(i int, c *child) error {
		cmd := hollow.Command{Op: "cpu-stop"}
		if name != "" {
			file := name + ".agents.cpu.pprof"
			if i > 0 {
				file = fmt.Sprintf("%s.agents-%d.cpu.pprof", name, i)
			}
			path, _ := filepath.Abs(filepath.Join(dir, file))
			cmd = hollow.Command{Op: "cpu-start", File: path}
		}
		return c.call(ctx, cmd, cmd.Op, nil)
	})
}

// stop stops every child.
func (g *hollowGroup) stop(grace time.Duration) error {
	return g.each(func(_ int, c *child) error { return c.stop(grace) })
}
