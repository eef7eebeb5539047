package test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fleetmq/fleet/hub/pki"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/etcdtest"
)

// regOp is one operation on one ConfigMap, as porcupine's input.
type regOp struct {
	Key  string
	Kind string // "get", "put" (unconditional apply), "cas" (apply with a resourceVersion)
	// Value is what put and cas write; Precond the resourceVersion cas
	// names.
	Value   string
	Precond int64
}

// regOut is what an operation returned. Unknown: no answer (timeout,
// connection lost, 5xx): it may or may not have taken effect.
type regOut struct {
	Unknown bool
	// Found (get), OK (put, cas: 200) or Conflict (409).
	Found, OK, Conflict bool
	Value               string
	RV                  int64
}

// regState is one ConfigMap: absent, or a value at a resourceVersion; RV
// -1 when the value was written by an operation whose answer is unknown.
type regState struct {
	Exists bool
	Value  string
	RV     int64
}

// registerModel is the store as one register per key with compare-and-set
// on the resourceVersion: gets see the last write, unconditional applies
// always take effect with a resourceVersion above the last, an apply with
// a resourceVersion takes effect only if it is the object's (else 409),
// and an operation without an answer may have taken effect or not.
func registerModel() porcupine.Model {
	nd := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			var keys []string
			for _, op := range h {
				k := op.Input.(regOp).Key
				if _, ok := by[k]; !ok {
					keys = append(keys, k)
				}
				by[k] = append(by[k], op)
			}
			var out [][]porcupine.Operation
			for _, k := range keys {
				out = append(out, by[k])
			}
			return out
		},
		Init: func() []any { return []any{regState{}} },
		Step: func(state, input, output any) []any {
			s, in, out := state.(regState), input.(regOp), output.(regOut)
			return stepRegister(s, in, out)
		},
		Equal: func(a, b any) bool { return a.(regState) == b.(regState) },
		DescribeOperation: func(input, output any) string {
			in, out := input.(regOp), output.(regOut)
			res := fmt.Sprintf("ok rv=%d", out.RV)
			switch {
			case out.Unknown:
				res = "unknown"
			case out.Conflict:
				res = "409"
			case in.Kind == "get" && !out.Found:
				res = "404"
			case in.Kind == "get":
				res = fmt.Sprintf("%s rv=%d", out.Value, out.RV)
			}
			return fmt.Sprintf("%s(%s %s rv=%d) -> %s", in.Kind, in.Key, in.Value, in.Precond, res)
		},
		DescribeState: func(state any) string {
			s := state.(regState)
			if !s.Exists {
				return "absent"
			}
			return fmt.Sprintf("%s@%d", s.Value, s.RV)
		},
	}
	return nd.ToModel()
}

func stepRegister(s regState, in regOp, out regOut) []any {
	applied := regState{Exists: true, Value: in.Value, RV: out.RV}
	if out.Unknown {
		applied.RV = -1
		if in.Kind == "get" {
			return []any{s}
		}
		if in.Kind == "cas" && s.RV != -1 && s.RV != in.Precond {
			return []any{s} // it could only have been refused
		}
		return []any{s, applied}
	}
	switch in.Kind {
	case "get":
		if out.Found != s.Exists || (s.Exists && out.Value != s.Value) {
			return nil
		}
		if s.Exists && s.RV != -1 && out.RV != s.RV {
			return nil
		}
		s.RV = out.RV // an unknown write's resourceVersion, now seen
		if !s.Exists {
			s.RV = 0
		}
		return []any{s}
	case "put":
		if out.Conflict {
			return []any{s} // refused: no effect
		}
		if s.Exists && s.RV != -1 && out.RV <= s.RV {
			return nil
		}
		return []any{applied}
	case "cas":
		if out.Conflict {
			if s.Exists && s.RV == in.Precond {
				return nil
			}
			return []any{s}
		}
		if !s.Exists || (s.RV != -1 && s.RV != in.Precond) || (s.RV != -1 && out.RV <= s.RV) {
			return nil
		}
		return []any{applied}
	}
	return nil
}

// hubAddrs are the hubs' API URLs and tokens, by ID, for clients that run
// while the test restarts hubs (a Hub's own fields change under Restart).
type hubAddrs struct {
	mu sync.Mutex
	m  map[string][2]string
}

func (a *hubAddrs) set(id string, h *Hub) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.m[id] = [2]string{h.URL, h.Token}
}

func (a *hubAddrs) get(id string) (url, token string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.m[id][0], a.m[id][1]
}

// linClient runs operations through one hub and records them.
type linClient struct {
	id    int
	hub   string
	addrs *hubAddrs
	// seen is the last resourceVersion this client read of each key.
	seen map[string]int64
	ops  []porcupine.Operation
	// counts by outcome, for the report.
	unknown, conflicts int
}

func cmYAML(name, value string, rv int64) []byte {
	meta := fmt.Sprintf("  name: %s\n", name)
	if rv > 0 {
		meta += fmt.Sprintf("  resourceVersion: %q\n", strconv.FormatInt(rv, 10))
	}
	return fmt.Appendf(nil, "apiVersion: fleet/v1\nkind: ConfigMap\nmetadata:\n%sdata:\n  v: %q\n", meta, value)
}

// do runs one operation and decodes its outcome.
func (c *linClient) do(in regOp) regOut {
	url, token := c.addrs.get(c.hub)
	if in.Kind == "get" {
		code, body, err := tryDo(url, token, http.MethodGet, "/v1/configmaps/"+in.Key, nil)
		switch {
		case err != nil || code >= 500:
			return regOut{Unknown: true}
		case code == http.StatusNotFound:
			return regOut{}
		case code != http.StatusOK:
			return regOut{Unknown: true}
		}
		var cm struct {
			Metadata schema.ObjectMeta `json:"metadata"`
			Data     map[string]string `json:"data"`
		}
		if json.Unmarshal(body, &cm) != nil {
			return regOut{Unknown: true}
		}
		rv, _ := strconv.ParseInt(cm.Metadata.ResourceVersion, 10, 64)
		return regOut{Found: true, Value: cm.Data["v"], RV: rv}
	}
	code, body, err := tryDo(url, token, http.MethodPost, "/v1/apply", cmYAML(in.Key, in.Value, in.Precond))
	switch {
	case err == nil && code == http.StatusConflict:
		return regOut{Conflict: true}
	case err != nil || code != http.StatusOK:
		return regOut{Unknown: true}
	}
	var resp schema.ApplyResponse
	if json.Unmarshal(body, &resp) != nil || len(resp.Results) != 1 {
		return regOut{Unknown: true}
	}
	var obj struct {
		Metadata schema.ObjectMeta `json:"metadata"`
	}
	if json.Unmarshal(resp.Results[0].Object, &obj) != nil {
		return regOut{Unknown: true}
	}
	rv, _ := strconv.ParseInt(obj.Metadata.ResourceVersion, 10, 64)
	return regOut{OK: true, RV: rv}
}

// run issues random gets, applies and compare-and-set applies on keys
// until stop, each timed on one monotonic clock (since t0).
func (c *linClient) run(keys []string, t0 time.Time, stop <-chan struct{}) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		in := regOp{Key: keys[rand.N(len(keys))], Kind: "get"}
		switch r := rand.N(10); {
		case r < 3:
			in.Kind, in.Value = "put", fmt.Sprintf("c%d-%d", c.id, n)
		case r < 6 && c.seen[in.Key] > 0:
			in.Kind, in.Value, in.Precond = "cas", fmt.Sprintf("c%d-%d", c.id, n), c.seen[in.Key]
		}
		call := time.Since(t0).Nanoseconds()
		out := c.do(in)
		ret := time.Since(t0).Nanoseconds()
		if out.Unknown {
			ret = math.MaxInt64 // it may take effect at any time after its call
			c.unknown++
		}
		if out.Conflict {
			c.conflicts++
		}
		if in.Kind == "get" && out.Found {
			c.seen[in.Key] = out.RV
		}
		c.ops = append(c.ops, porcupine.Operation{ClientId: c.id, Input: in, Call: call, Output: out, Return: ret})
		if out.Unknown {
			time.Sleep(100 * time.Millisecond) // the hub is down: pace the retries
		}
	}
}

// TestE2ELinearizableAcrossLeaderKills: two fleet-hub processes on a real
// 3-member etcd cluster; four clients (two per hub) get, apply and
// compare-and-set-apply (metadata.resourceVersion) three ConfigMaps
// through the hubs' HTTP APIs while the leader hub is killed with SIGKILL
// and restarted, three times. Every operation's call and return times and
// its result are recorded (one with no answer is recorded as such: it may
// have taken effect at any time after its call), and porcupine checks the
// history against a register per key with compare-and-set on the
// resourceVersion. A non-linearizable history fails the test; its
// visualization is written to the test's temporary directory.
func TestE2ELinearizableAcrossLeaderKills(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{TLS: true})
	const prefix = "/fleet/linearizable/"
	const lease = 5 * time.Second
	args := append(etcdArgs(c, prefix), "--leader-lease", lease.String())
	a := StartHub(t, HubOptions{Args: append(slices.Clone(args), "--hub-id", "hub-a")})
	dirB := filepath.Join(t.TempDir(), "fleet-data")
	for _, f := range []string{store.SecretKeyFileName, pki.CACertName, pki.CAKeyName, pki.SigningKeyName, "admin.conf"} {
		copyFile(t, filepath.Join(a.DataDir, f), filepath.Join(dirB, f))
	}
	b := StartHub(t, HubOptions{DataDir: dirB, Args: append(slices.Clone(args), "--hub-id", "hub-b")})
	p := pairOf(a, b)
	p.awaitLeaderIs(t, "hub-b", "hub-a", 2, 30*time.Second)

	addrs := &hubAddrs{m: map[string][2]string{}}
	addrs.set("hub-a", a)
	addrs.set("hub-b", b)
	keys := []string{"lin-0", "lin-1", "lin-2"}
	t0 := time.Now()
	stop := make(chan struct{})
	var running sync.WaitGroup
	var clients []*linClient
	for i, hub := range []string{"hub-a", "hub-b", "hub-a", "hub-b"} {
		cl := &linClient{id: i, hub: hub, addrs: addrs, seen: map[string]int64{}}
		clients = append(clients, cl)
		running.Go(func() { cl.run(keys, t0, stop) })
	}
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
			running.Wait()
		}
	}()

	leader := "hub-a"
	const kills = 3
	for i := range kills {
		next := p.other(leader)
		time.Sleep(time.Second + rand.N(lease/2)) // operations under a steady leader
		killed := time.Now()
		p.hubs[leader].Kill()
		took := p.awaitLeaderIs(t, next, next, 1, 4*lease)
		p.restart(leader)
		addrs.set(leader, p.hubs[leader])
		p.awaitLeaderIs(t, leader, next, 2, 30*time.Second)
		t.Logf("kill %d of %s: %s leads after %s; %s back as a standby after %s", i, leader, next, took.Round(time.Millisecond), leader, time.Since(killed).Round(time.Millisecond))
		leader = next
	}
	time.Sleep(time.Second) // operations after the last failover
	close(stop)
	running.Wait()
	stopped = true

	var history []porcupine.Operation
	unknown, conflicts, completed := 0, 0, 0
	for _, cl := range clients {
		history = append(history, cl.ops...)
		unknown += cl.unknown
		conflicts += cl.conflicts
	}
	completed = len(history) - unknown
	if completed < 100 {
		t.Fatalf("only %d operations completed (%d without an answer): too few to check", completed, unknown)
	}
	model := registerModel()
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model, history, 2*time.Minute)
	t.Logf("%d operations (%d completed, %d without an answer, %d refused with 409) across %d leader kills: porcupine says %s in %s",
		len(history), completed, unknown, conflicts, kills, res, time.Since(start).Round(time.Millisecond))
	switch res {
	case porcupine.Ok:
	case porcupine.Illegal:
		path := filepath.Join(t.TempDir(), "linearizability.html")
		if err := porcupine.VisualizePath(model, info, path); err != nil {
			t.Errorf("write the visualization: %v", err)
		}
		if keep := os.Getenv("FLEET_LINEARIZABILITY_HTML"); keep != "" {
			_ = porcupine.VisualizePath(model, info, keep)
		}
		t.Fatalf("the history of gets and applies through both hubs is not linearizable; visualization: %s", path)
	default:
		t.Fatalf("porcupine could not decide within its timeout (%s) on %d operations", res, len(history))
	}
}

// TestRegisterModel: the model TestE2ELinearizableAcrossLeaderKills
// checks with accepts what a linearizable store may answer (a write
// without an answer seen later, a 409 for a stale resourceVersion) and
// refuses stale reads, a lost acknowledged write and a compare-and-set
// that succeeded on a stale resourceVersion.
func TestRegisterModel(t *testing.T) {
	op := func(client int, call, ret int64, in regOp, out regOut) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out}
	}
	put := func(v string) regOp { return regOp{Key: "k", Kind: "put", Value: v} }
	cas := func(v string, rv int64) regOp { return regOp{Key: "k", Kind: "cas", Value: v, Precond: rv} }
	get := regOp{Key: "k", Kind: "get"}
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"read after write", []porcupine.Operation{
			op(0, 0, 10, put("a"), regOut{OK: true, RV: 5}),
			op(1, 20, 30, get, regOut{Found: true, Value: "a", RV: 5}),
		}, porcupine.Ok},
		{"stale read", []porcupine.Operation{
			op(0, 0, 10, put("a"), regOut{OK: true, RV: 5}),
			op(0, 11, 19, put("b"), regOut{OK: true, RV: 6}),
			op(1, 20, 30, get, regOut{Found: true, Value: "a", RV: 5}),
		}, porcupine.Illegal},
		{"acknowledged write lost", []porcupine.Operation{
			op(0, 0, 10, put("a"), regOut{OK: true, RV: 5}),
			op(1, 20, 30, get, regOut{}),
		}, porcupine.Illegal},
		{"unknown write seen later", []porcupine.Operation{
			op(0, 0, 10, put("a"), regOut{OK: true, RV: 5}),
			op(0, 11, math.MaxInt64, put("b"), regOut{Unknown: true}),
			op(1, 20, 30, get, regOut{Found: true, Value: "b", RV: 9}),
			op(1, 31, 40, cas("c", 9), regOut{OK: true, RV: 10}),
		}, porcupine.Ok},
		{"unknown write never seen", []porcupine.Operation{
			op(0, 0, 10, put("a"), regOut{OK: true, RV: 5}),
			op(0, 11, math.MaxInt64, put("b"), regOut{Unknown: true}),
			op(1, 20, 30, get, regOut{Found: true, Value: "a", RV: 5}),
		}, porcupine.Ok},
		{"409 on a stale resourceVersion", []porcupine.Operation{
			op(0, 0, 10, put("a"), regOut{OK: true, RV: 5}),
			op(0, 11, 19, put("b"), regOut{OK: true, RV: 6}),
			op(1, 20, 30, cas("c", 5), regOut{Conflict: true}),
		}, porcupine.Ok},
		{"compare-and-set on a stale resourceVersion succeeds", []porcupine.Operation{
			op(0, 0, 10, put("a"), regOut{OK: true, RV: 5}),
			op(0, 11, 19, put("b"), regOut{OK: true, RV: 6}),
			op(1, 20, 30, cas("c", 5), regOut{OK: true, RV: 7}),
		}, porcupine.Illegal},
		{"409 on the current resourceVersion", []porcupine.Operation{
			op(0, 0, 10, put("a"), regOut{OK: true, RV: 5}),
			op(1, 20, 30, cas("c", 5), regOut{Conflict: true}),
		}, porcupine.Illegal},
	} {
		if got := porcupine.CheckOperationsTimeout(registerModel(), tc.ops, 10*time.Second); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
