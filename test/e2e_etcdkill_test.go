package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/etcdtest"
)

// timedApplier applies new ConfigMaps through one hub again and again and
// keeps, for each acknowledged one, its name and when the answer came.
type timedApplier struct {
	mu     sync.Mutex
	acked  map[string]string // name -> data value
	doneAt []time.Time       // answer times of the acknowledged applies
	failed int
	slow   time.Duration // the longest acknowledged apply
}

func (a *timedApplier) run(h *Hub, id int, stop <-chan struct{}) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		name, value := fmt.Sprintf("kill-%d-%d", id, n), fmt.Sprintf("v%d", n)
		body := fmt.Appendf(nil, "apiVersion: fleet/v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  value: %q\n", name, value)
		start := time.Now()
		code, _, err := tryDo(h.URL, h.Token, http.MethodPost, "/v1/apply", body)
		took := time.Since(start)
		a.mu.Lock()
		if err == nil && code == http.StatusOK {
			a.acked[name] = value
			a.doneAt = append(a.doneAt, time.Now())
			a.slow = max(a.slow, took)
		} else {
			a.failed++
		}
		a.mu.Unlock()
	}
}

// pauseAround is the longest time without an acknowledged apply in the
// window [from, to], among all appliers.
func pauseAround(appliers []*timedApplier, from, to time.Time) time.Duration {
	times := []time.Time{from}
	for _, a := range appliers {
		a.mu.Lock()
		for _, t := range a.doneAt {
			if !t.Before(from) && !t.After(to) {
				times = append(times, t)
			}
		}
		a.mu.Unlock()
	}
	times = append(times, to)
	slices.SortFunc(times, func(x, y time.Time) int { return x.Compare(y) })
	var gap time.Duration
	for i := 1; i < len(times); i++ {
		gap = max(gap, times[i].Sub(times[i-1]))
	}
	return gap
}

// TestE2EEtcdMemberKills: a fleet-hub process on a real 3-member etcd
// cluster over TLS, with four clients applying ConfigMaps through its API
// without pause. kill -9 of one etcd member that does not lead (then it
// is restarted and catches up), then of the member that leads the raft
// group (then it is restarted too): the applies go on, pausing at most
// briefly (measured, reported: the longest time without an acknowledged
// apply after each kill), and every acknowledged apply is there at the
// end, with its value, read through the hub and straight from etcd's
// keys.
func TestE2EEtcdMemberKills(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{TLS: true})
	h := StartHub(t, HubOptions{Args: etcdArgs(c, "/fleet/memberkills/")})
	cli := c.Client(t)

	stop := make(chan struct{})
	var running sync.WaitGroup
	var appliers []*timedApplier
	for i := range 4 {
		a := &timedApplier{acked: map[string]string{}}
		appliers = append(appliers, a)
		running.Go(func() { a.run(h, i, stop) })
	}
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
			running.Wait()
		}
	}()
	acked := func() int {
		n := 0
		for _, a := range appliers {
			a.mu.Lock()
			n += len(a.acked)
			a.mu.Unlock()
		}
		return n
	}
	// Applies are flowing before the first kill.
	awaitf(t, 30*time.Second, func() bool { return acked() >= 20 }, "20 acknowledged applies before the kills")

	kill := func(what string, pick func(ctx context.Context) (int, error)) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		i, err := pick(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		m := c.Members[i]
		before := acked()
		killed := time.Now()
		m.Kill()
		// Applies must go on without the member.
		awaitf(t, 30*time.Second, func() bool { return acked() >= before+50 }, "50 acknowledged applies after kill -9 of %s (%s)", m.Name, what)
		resumed := time.Since(killed)
		time.Sleep(2 * time.Second) // applies on two members, to measure over
		window := time.Now()
		pause := pauseAround(appliers, killed, window)
		t.Logf("kill -9 of etcd %s (%s): 50 applies acknowledged %s after the kill; longest time without an acknowledged apply in the %s after it: %s",
			m.Name, what, resumed.Round(time.Millisecond), window.Sub(killed).Round(time.Millisecond), pause.Round(time.Millisecond))
		c.Restart(t, m)
		t.Logf("etcd %s restarted on its data and serving reads %s after the kill", m.Name, time.Since(killed).Round(time.Millisecond))
	}
	kill("a member that does not lead", func(ctx context.Context) (int, error) {
		l, err := c.Leader(ctx, cli)
		return (l + 1) % len(c.Members), err
	})
	kill("the raft leader", func(ctx context.Context) (int, error) { return c.Leader(ctx, cli) })
	after := acked()
	awaitf(t, 30*time.Second, func() bool { return acked() >= after+20 }, "applies after the restarts")
	close(stop)
	running.Wait()
	stopped = true

	// Every acknowledged apply is there, with its value.
	code, body := h.Do(t, http.MethodGet, "/v1/configmaps", nil)
	if code != http.StatusOK {
		t.Fatalf("list configmaps: %d %s", code, body)
	}
	var list struct {
		Items []struct {
			Metadata schema.ObjectMeta `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, it := range list.Items {
		listed[it.Metadata.Name] = true
	}
	total, failed := 0, 0
	var slow time.Duration
	for _, a := range appliers {
		for name, v := range a.acked {
			total++
			if !listed[name] {
				t.Errorf("acknowledged apply %s missing from the list", name)
				continue
			}
			var cm schema.ConfigMap
			if err := json.Unmarshal(mustDo(t, h, http.MethodGet, "/v1/configmaps/"+name, nil, http.StatusOK), &cm); err != nil || cm.Data["value"] != v {
				t.Errorf("acknowledged apply %s (value %s): read back %v (%v)", name, v, cm.Data, err)
			}
		}
		failed += a.failed
		slow = max(slow, a.slow)
	}
	// And in etcd, under the fleet's prefix, whatever any hub caches.
	resp, err := cli.Get(t.Context(), "/fleet/memberkills/v1/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count < int64(total) {
		t.Errorf("etcd holds %d keys under the fleet's v1/, fewer than the %d acknowledged applies", resp.Count, total)
	}
	t.Logf("%d applies acknowledged, all present (hub list and etcd: %d keys); %d failed (none needs to); slowest acknowledged apply %s",
		total, resp.Count, failed, slow.Round(time.Millisecond))
}
