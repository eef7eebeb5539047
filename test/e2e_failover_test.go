package test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/fleetmq/fleet/hub/pki"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/etcdtest"
)

// hubPair is two fleet-hub processes on one etcd store, by ID, with
// their current API URLs (a restarted hub gets a new port) behind a lock
// so the appliers can read them while the test restarts hubs.
type hubPair struct {
	mu     sync.Mutex
	hubs   map[string]*Hub
	urls   map[string]string
	tokens map[string]string
}

func (p *hubPair) url(id string) (string, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.urls[id], p.tokens[id]
}

func (p *hubPair) restart(id string) {
	h := p.hubs[id]
	h.Restart()
	p.mu.Lock()
	p.urls[id], p.tokens[id] = h.URL, h.Token
	p.mu.Unlock()
}

func (p *hubPair) other(id string) string {
	for k := range p.hubs {
		if k != id {
			return k
		}
	}
	return ""
}

// tryDo is one authenticated request that may fail (a hub being killed).
func tryDo(url, token, method, path string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// hubsOf reads GET /v1/hubs from the hub id.
func (p *hubPair) hubsOf(id string) (schema.HubMemberList, error) {
	url, token := p.url(id)
	var list schema.HubMemberList
	code, body, err := tryDo(url, token, http.MethodGet, "/v1/hubs", nil)
	if err != nil {
		return list, err
	}
	if code != http.StatusOK {
		return list, fmt.Errorf("GET /v1/hubs: %d %s", code, body)
	}
	return list, json.Unmarshal(body, &list)
}

// leaderMetric reads fleet_hub_leader from the hub id (-1 if unreadable).
func (p *hubPair) leaderMetric(id string) float64 {
	url, token := p.url(id)
	code, body, err := tryDo(url, token, http.MethodGet, "/metrics", nil)
	if err != nil || code != http.StatusOK {
		return -1
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "fleet_hub_leader "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// awaitLeaderIs polls the hub id until it reports leader as the leader,
// among want members; it returns how long that took.
func (p *hubPair) awaitLeaderIs(t *testing.T, id, leader string, want int, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var last schema.HubMemberList
	var lastErr error
	for time.Since(start) < within {
		last, lastErr = p.hubsOf(id)
		if lastErr == nil && last.Leader == leader && len(last.Items) == want {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
	t.Fatalf("hub %s: leader %q among %d hubs after %s (%v), want %s among %d", id, last.Leader, len(last.Items), within, lastErr, leader, want)
	return 0
}

// connackCode connects to an MQTT broker with MQTT 5 (any credentials)
// and returns the CONNACK's reason code and reason string.
func connackCode(addr string) (byte, string, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return 0, "", err
	}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: "probe-1",
			UsernameFlag: true, Username: []byte("probe-1"), PasswordFlag: true, Password: []byte("not-a-token")}}
	var buf bytes.Buffer
	if err := pk.ConnectEncode(&buf); err != nil {
		return 0, "", err
	}
	if _, err := conn.Write(buf.Bytes()); err != nil {
		return 0, "", err
	}
	r := bufio.NewReader(conn)
	b, err := r.ReadByte()
	if err != nil {
		return 0, "", err
	}
	ack := packets.Packet{ProtocolVersion: 5}
	if err := ack.FixedHeader.Decode(b); err != nil || ack.FixedHeader.Type != packets.Connack {
		return 0, "", fmt.Errorf("first packet %+v (%v), want CONNACK", ack.FixedHeader, err)
	}
	n, _, err := packets.DecodeLength(r)
	if err != nil {
		return 0, "", err
	}
	ack.FixedHeader.Remaining = n
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, "", err
	}
	if err := ack.ConnackDecode(body); err != nil {
		return 0, "", err
	}
	return ack.ReasonCode, ack.Properties.ReasonString, nil
}

// startHubPair starts hub-a, then hub-b with hub-a's key files, on one
// etcd prefix; hub-a leads.
func startHubPair(t *testing.T, c *etcdtest.Cluster, prefix string) *hubPair {
	t.Helper()
	a := StartHub(t, HubOptions{Args: append(etcdArgs(c, prefix), "--hub-id", "hub-a")})
	dirB := filepath.Join(t.TempDir(), "fleet-data")
	for _, f := range []string{store.SecretKeyFileName, pki.CACertName, pki.CAKeyName, pki.SigningKeyName, "admin.conf"} {
		copyFile(t, filepath.Join(a.DataDir, f), filepath.Join(dirB, f))
	}
	b := StartHub(t, HubOptions{DataDir: dirB, Args: append(etcdArgs(c, prefix), "--hub-id", "hub-b")})
	p := &hubPair{hubs: map[string]*Hub{"hub-a": a, "hub-b": b}, urls: map[string]string{"hub-a": a.URL, "hub-b": b.URL},
		tokens: map[string]string{"hub-a": a.Token, "hub-b": b.Token}}
	p.awaitLeaderIs(t, "hub-b", "hub-a", 2, 30*time.Second)
	return p
}

// failoverKills is how many times TestE2EHubFailover kills the leader:
// FLEET_FAILOVER_KILLS (make bench-failover: 20, for BENCHMARKS.md),
// default 5 (3 with -short): each kill waits out up to a lease.
func failoverKills() int {
	if n, err := strconv.Atoi(os.Getenv("FLEET_FAILOVER_KILLS")); err == nil && n > 0 {
		return n
	}
	if testing.Short() {
		return 3
	}
	return 5
}

// applier applies a new ConfigMap through one hub again and again, and
// keeps the names the API acknowledged.
type applier struct {
	mu    sync.Mutex
	acked []string
	tried int
}

func (a *applier) run(p *hubPair, id string, stop <-chan struct{}, done *sync.WaitGroup) {
	defer done.Done()
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		name := fmt.Sprintf("cm-%s-%d", id, n)
		body := fmt.Sprintf("apiVersion: fleet/v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  n: %q\n", name, strconv.Itoa(n))
		url, token := p.url(id)
		code, _, err := tryDo(url, token, http.MethodPost, "/v1/apply", []byte(body))
		a.mu.Lock()
		a.tried++
		if err == nil && code == http.StatusOK {
			a.acked = append(a.acked, name)
		}
		a.mu.Unlock()
		if err != nil {
			time.Sleep(50 * time.Millisecond) // the hub is down: pace the retries
		}
	}
}

// TestE2EHubFailover: two fleet-hub processes on a 3-member etcd cluster.
// One leads (GET /v1/hubs, fleet_hub_leader); the standby's embedded broker
// refuses MQTT clients with "server unavailable". kill -9 of the leader,
// again and again, while ConfigMaps are applied through both hubs: the
// other hub leads within the lease (10 s), its broker then accepts
// devices, applies through the surviving hub keep working, and every
// acknowledged apply is there at the end.
func TestE2EHubFailover(t *testing.T) {
	t.Parallel() // mostly waits out leases; its own etcd and hubs, no devices
	c := etcdtest.Start(t, etcdtest.Options{TLS: true})
	p := startHubPair(t, c, "/fleet/failover/")
	const lease = 10 * time.Second

	if code, why, err := connackCode(p.hubs["hub-b"].MQTTAddr); err != nil || code != packets.ErrServerUnavailable.Code || !strings.Contains(why, "standby") {
		t.Fatalf("standby's broker: CONNACK %#x %q (%v), want %#x naming the standby", code, why, err, packets.ErrServerUnavailable.Code)
	}
	if v := p.leaderMetric("hub-a"); v != 1 {
		t.Fatalf("fleet_hub_leader on the leader: %v, want 1", v)
	}
	if v := p.leaderMetric("hub-b"); v != 0 {
		t.Fatalf("fleet_hub_leader on the standby: %v, want 0", v)
	}

	stop := make(chan struct{})
	var running sync.WaitGroup
	appliers := map[string]*applier{"hub-a": {}, "hub-b": {}}
	for id, a := range appliers {
		running.Add(1)
		go a.run(p, id, stop, &running)
	}
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
			running.Wait()
		}
	}()

	leader := "hub-a"
	var failovers, brokerOpen []time.Duration
	for i := range failoverKills() {
		next := p.other(leader)
		p.awaitLeaderIs(t, next, leader, 2, 30*time.Second)
		appliers[next].mu.Lock()
		before := appliers[next].tried
		appliers[next].mu.Unlock()
		// Kill at a random moment of the lease's renewal period (a third
		// of the TTL), so that the failover times sample it evenly: the
		// loop's own rhythm would otherwise kill at the same phase.
		time.Sleep(rand.N(lease / 3))
		left := int64(-1)
		if list, err := p.hubsOf(next); err == nil && len(list.Items) > 0 && list.Items[0].ID == leader {
			left = list.Items[0].LeaseRemainingSeconds
		}
		killed := time.Now()
		p.hubs[leader].Kill()
		took := p.awaitLeaderIs(t, next, next, 1, 3*lease) // the dead hub's registration goes with its lease
		failovers = append(failovers, took)
		// The hub starts its term a moment after etcd names it.
		for v := p.leaderMetric(next); v != 1; v = p.leaderMetric(next) {
			if time.Since(killed) > 3*lease {
				t.Fatalf("kill %d: fleet_hub_leader on the new leader %s: %v, want 1", i, next, v)
			}
			time.Sleep(20 * time.Millisecond) // poll interval
		}
		// The new leader's broker accepts devices once the desired
		// states are rebuilt (a bogus login: refused as such, not as a
		// standby).
		for {
			code, _, err := connackCode(p.hubs[next].MQTTAddr)
			if err == nil && code != packets.ErrServerUnavailable.Code {
				break
			}
			if time.Since(killed) > 3*lease {
				t.Fatalf("kill %d: the new leader's broker still refuses devices %s after the kill: %#x %v", i, time.Since(killed), code, err)
			}
			time.Sleep(20 * time.Millisecond) // poll interval
		}
		brokerOpen = append(brokerOpen, time.Since(killed))
		appliers[next].mu.Lock()
		during := appliers[next].tried - before
		appliers[next].mu.Unlock()
		t.Logf("kill %d of %s (its lease had %d s left): %s leads after %s, its broker accepts devices after %s; %d applies through it meanwhile",
			i, leader, left, next, took.Round(time.Millisecond), brokerOpen[i].Round(time.Millisecond), during)
		p.restart(leader) // as systemd would: it comes back as a standby
		p.awaitLeaderIs(t, leader, next, 2, 30*time.Second)
		if code, _, err := connackCode(p.hubs[leader].MQTTAddr); err != nil || code != packets.ErrServerUnavailable.Code {
			t.Fatalf("kill %d: the restarted hub's broker: %#x %v, want server unavailable", i, code, err)
		}
		leader = next
	}
	close(stop)
	running.Wait()
	stopped = true

	// Every acknowledged apply is in the store, seen through both hubs.
	for _, id := range []string{"hub-a", "hub-b"} {
		url, token := p.url(id)
		code, body, err := tryDo(url, token, http.MethodGet, "/v1/configmaps", nil)
		if err != nil || code != http.StatusOK {
			t.Fatalf("list configmaps through %s: %d %v", id, code, err)
		}
		var list struct {
			Items []struct {
				Metadata schema.ObjectMeta `json:"metadata"`
			} `json:"items"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, it := range list.Items {
			have[it.Metadata.Name] = true
		}
		for from, a := range appliers {
			for _, name := range a.acked {
				if !have[name] {
					t.Errorf("acknowledged apply %s (through %s) missing from %s's list", name, from, id)
				}
			}
		}
	}
	total := 0
	for _, a := range appliers {
		total += len(a.acked)
	}
	t.Logf("failover over %d kills (lease %s): p50 %s, max %s; broker open p50 %s, max %s; %d applies acknowledged, all present",
		len(failovers), lease, pct(failovers, 50), pct(failovers, 100), pct(brokerOpen, 50), pct(brokerOpen, 100), total)
}

// pct is the q-th percentile (nearest rank) of ds.
func pct(ds []time.Duration, q int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (q*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))].Round(time.Millisecond)
}
