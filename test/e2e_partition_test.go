package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fleetmq/fleet/hub/leader"
	"github.com/fleetmq/fleet/hub/pki"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/etcdtest"
)

// desiredSeen is one desired state a subscriber received, when.
type desiredSeen struct {
	at    time.Time
	gen   int64
	image string
}

// desiredLog records the desired states of one device that a device
// client receives on one broker.
type desiredLog struct {
	mu   sync.Mutex
	seen []desiredSeen
}

func (l *desiredLog) add(m mqttMsg) {
	var ds schema.DesiredState
	if len(m.Payload) == 0 || json.Unmarshal(m.Payload, &ds) != nil {
		return
	}
	l.mu.Lock()
	l.seen = append(l.seen, desiredSeen{at: time.Now(), gen: ds.Generation, image: imageOf(ds)})
	l.mu.Unlock()
}

func (l *desiredLog) all() []desiredSeen {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen)
}

// subscribeDesired connects to url as device, subscribes to its desired
// topic and logs what arrives.
func subscribeDesired(t *testing.T, url, device, token string) (*mqttClient, *desiredLog) {
	t.Helper()
	cl := mustDialMQTT(t, url, device, token, dialOpts{})
	log := &desiredLog{}
	cl.mu.Lock()
	cl.onMsg = log.add
	cl.mu.Unlock()
	if code := cl.subscribe(topics.Device(device, schema.TopicDesired)); code > 2 {
		t.Fatalf("%s: subscribe to its desired state: SUBACK %#x", device, code)
	}
	return cl, log
}

// pairOf is the hubPair of hub-a and hub-b.
func pairOf(a, b *Hub) *hubPair {
	return newHubPair(map[string]*Hub{"hub-a": a, "hub-b": b})
}

// electionKeys lists the election keys of the fleet under prefix, oldest
// (the leader's) first.
func electionKeys(t *testing.T, cli *clientv3.Client, prefix string) []*mvccpb.KeyValue {
	t.Helper()
	resp, err := cli.Get(t.Context(), leader.ElectionPrefix(prefix), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatalf("read election keys: %v", err)
	}
	return resp.Kvs
}

// imageOf is the image of the first container of the first pod ("" if none).
func imageOf(d schema.DesiredState) string {
	if len(d.Pods) == 0 || len(d.Pods[0].Spec.Containers) == 0 {
		return ""
	}
	return d.Pods[0].Spec.Containers[0].Image
}

// TestE2EPartitionedLeaderHub: 3 etcd members, two fleet-hub processes;
// the leader (hub-a) reaches etcd only through in-process TCP proxies. A
// device client subscribed on the leader's broker sees its desired states.
// The proxies are cut (connections dropped, new ones refused) while
// changes keep being applied through hub-b:
//
//   - hub-a stops publishing before its lease ends: its broker drops the
//     device and publishes nothing more, before etcd deletes hub-a's
//     election key (the lease's end, seen by a watch of the election);
//   - hub-a never commits after losing leadership, checked by the fence,
//     not by timing: after the partition heals, etcd's history of the
//     device's desired state after hub-a's election key was deleted holds
//     only states of the new leader (none of hub-a's stale view of the
//     deployment), a transaction fenced on hub-a's term (its election
//     key's create revision, as the store fences) is refused, and every
//     fenced commit hub-a logged after the heal was refused with
//     ErrNotLeader;
//   - hub-b leads, its broker publishes the change made during the
//     partition with a higher generation, and hub-a, restarted, is a
//     standby.
func TestE2EPartitionedLeaderHub(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{TLS: true})
	const prefix = "/fleet/partition/"
	const lease = 6 * time.Second
	var proxies []*Proxy
	var viaProxy []string
	for _, hp := range c.HostPorts() {
		p := StartProxy(t, hp)
		proxies = append(proxies, p)
		viaProxy = append(viaProxy, p.Addr)
	}
	argsA := etcdArgs(c, prefix)
	argsA[1] = "etcd://" + strings.Join(viaProxy, ",")
	leaseArg := []string{"--leader-lease", lease.String()}
	a := StartHub(t, HubOptions{Args: slices.Concat(argsA, leaseArg, []string{"--hub-id", "hub-a"})})
	dirB := filepath.Join(t.TempDir(), "fleet-data")
	for _, f := range []string{store.SecretKeyFileName, pki.CACertName, pki.CAKeyName, pki.SigningKeyName, "admin.conf"} {
		copyFile(t, filepath.Join(a.DataDir, f), filepath.Join(dirB, f))
	}
	b := StartHub(t, HubOptions{DataDir: dirB, Args: slices.Concat(etcdArgs(c, prefix), leaseArg, []string{"--hub-id", "hub-b"})})
	pair := pairOf(a, b)
	pair.awaitLeaderIs(t, "hub-b", "hub-a", 2, 30*time.Second)
	awaitf(t, 30*time.Second, func() bool { return pair.leaderMetric("hub-a") == 1 }, "fleet_hub_leader on hub-a")

	cli := c.Client(t)
	keys := electionKeys(t, cli, prefix)
	if len(keys) != 2 || string(keys[0].Value) != "hub-a" {
		t.Fatalf("election keys %v, want hub-a's then hub-b's", keys)
	}
	keyA, revA := string(keys[0].Key), keys[0].CreateRevision
	// The end of hub-a's lease is when etcd deletes its election key.
	leaseEnd := make(chan clientv3.WatchResponse, 1)
	wctx, wcancel := context.WithCancel(t.Context())
	defer wcancel()
	go func() {
		for wr := range cli.Watch(wctx, keyA, clientv3.WithRev(revA)) {
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					leaseEnd <- wr
					return
				}
			}
		}
	}()

	const device = "pi-1"
	token := addDevice(t, b, device, map[string]string{"site": "lab"})
	applyYAML(t, b, webYAML("web", "nginx:pre-0", map[string]string{"site": "lab"}))
	subA, logA := subscribeDesired(t, a.MQTTURL, device, token)
	subA.awaitDesired(device, func(d schema.DesiredState) bool { return imageOf(d) == "nginx:pre-0" })
	applyYAML(t, b, webYAML("web", "nginx:pre-1", map[string]string{"site": "lab"}))
	last := subA.awaitDesired(device, func(d schema.DesiredState) bool { return imageOf(d) == "nginx:pre-1" })

	// Cut hub-a from etcd, and keep changing the deployment through hub-b.
	cut := time.Now()
	for _, p := range proxies {
		p.Partition()
	}
	var applied atomic.Int64
	stop := make(chan struct{})
	var applying sync.WaitGroup
	applying.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond): // the pace of the changes
			}
			code, _, err := tryDo(b.URL, b.Token, http.MethodPost, "/v1/apply", []byte(webYAML("web", fmt.Sprintf("nginx:post-%d", n), map[string]string{"site": "lab"})))
			if err == nil && code == http.StatusOK {
				applied.Store(int64(n) + 1)
			}
		}
	})
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		applying.Wait()
	}()

	subA.awaitLost(3 * lease)
	dropped := time.Now()
	var ended clientv3.WatchResponse
	select {
	case ended = <-leaseEnd:
	case <-time.After(4 * lease):
		t.Fatalf("hub-a's election key still there %s after the cut", 4*lease)
	}
	endedAt := time.Now()
	revDel := ended.Header.Revision
	t.Logf("cut at 0: hub-a's broker dropped the device after %s; etcd ended hub-a's lease (deleted %s) after %s at revision %d (lease %s)",
		dropped.Sub(cut).Round(time.Millisecond), keyA, endedAt.Sub(cut).Round(time.Millisecond), revDel, lease)
	if !dropped.Before(endedAt) {
		t.Errorf("hub-a's broker dropped the device %s after the cut, not before its lease ended (%s after the cut)",
			dropped.Sub(cut).Round(time.Millisecond), endedAt.Sub(cut).Round(time.Millisecond))
	}
	for _, s := range logA.all() {
		if s.at.After(cut) && s.image != imageOf(last) {
			t.Errorf("hub-a published generation %d (%s) %s after the cut", s.gen, s.image, s.at.Sub(cut))
		}
		if !s.at.Before(dropped) {
			t.Errorf("hub-a published generation %d after it dropped the device", s.gen)
		}
	}

	// hub-b leads and publishes what was applied during the partition.
	pair.awaitLeaderIs(t, "hub-b", "hub-b", 1, 4*lease)
	awaitf(t, 4*lease, func() bool { return applied.Load() > 0 }, "an apply through hub-b during the partition")
	var subB *mqttClient
	awaitf(t, 4*lease, func() bool {
		cl, err := dialMQTT(t, b.MQTTURL, device, token, dialOpts{})
		subB = cl
		return err == nil
	}, "hub-b's broker accepts the device")
	logB := &desiredLog{}
	subB.mu.Lock()
	subB.onMsg = logB.add
	subB.mu.Unlock()
	subB.subscribe(topics.Device(device, schema.TopicDesired))
	newer := subB.awaitDesired(device, func(d schema.DesiredState) bool {
		return d.Generation > last.Generation && strings.HasPrefix(imageOf(d), "nginx:post-")
	})
	t.Logf("hub-b leads; its broker publishes generation %d (%s) after %s; hub-a's last was %d",
		newer.Generation, imageOf(newer), time.Since(cut).Round(time.Millisecond), last.Generation)
	close(stop)
	applying.Wait()

	// Heal. hub-a, having lost its term, exits (to come back as a standby).
	t.Logf("hub-a's process at the heal, %s after the cut: running %v", time.Since(cut).Round(time.Millisecond), a.running())
	for _, p := range proxies {
		p.Heal()
	}
	awaitf(t, 30*time.Second, func() bool { return !a.running() }, "hub-a exits after losing the leadership")
	logs := a.Logs()
	if !strings.Contains(logs, "leadership lost") {
		t.Errorf("hub-a's log does not say it lost the leadership")
	}
	refused := strings.Count(logs, "fenced commit refused")
	t.Logf("hub-a logged %d fenced commits refused with ErrNotLeader", refused)

	checkFenced(t, cli, prefix, device, keyA, revA, revDel)

	pair.restart("hub-a")
	pair.awaitLeaderIs(t, "hub-a", "hub-b", 2, 30*time.Second)
	if v := pair.leaderMetric("hub-a"); v != 0 {
		t.Errorf("fleet_hub_leader on the restarted hub-a: %v, want 0", v)
	}
}

// checkFenced checks in etcd that the old leader's term (election key
// keyA, created at revA, deleted at revDel) wrote nothing after it ended:
// every version of the device's desired state written after revDel
// carries a state of the new leader's (an image applied during the
// partition, which hub-a never saw), and a transaction fenced as the
// store fences hub-a's term is refused.
func checkFenced(t *testing.T, cli *clientv3.Client, prefix, device, keyA string, revA, revDel int64) {
	t.Helper()
	key := prefix + store.DesiredKey(device)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	now, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	versions := 0
	if len(now.Kvs) == 0 || now.Kvs[0].ModRevision <= revDel {
		t.Fatalf("no desired state of %s written after revision %d: the new leader published nothing new", device, revDel)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	for wr := range cli.Watch(wctx, key, clientv3.WithRev(revDel+1)) {
		if err := wr.Err(); err != nil {
			t.Fatalf("watch %s from %d: %v", key, revDel+1, err)
		}
		done := false
		for _, ev := range wr.Events {
			versions++
			if strings.Contains(string(ev.Kv.Value), "nginx:pre-") {
				t.Errorf("desired state of %s written at revision %d, after hub-a's term ended (%d), holds hub-a's stale view: %.200s",
					device, ev.Kv.ModRevision, revDel, ev.Kv.Value)
			}
			done = done || ev.Kv.ModRevision >= now.Kvs[0].ModRevision
		}
		if done {
			break
		}
	}
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(keyA), "=", revA)).
		Then(clientv3.OpPut(prefix+"v1/test/fence-probe", "hub-a")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Succeeded {
		t.Errorf("a commit fenced on hub-a's term (%s created at %d) went through after the term ended", keyA, revA)
	}
	t.Logf("fence: %d versions of %s's desired state after revision %d, all the new leader's; a commit fenced on hub-a's term is refused", versions, device, revDel)
}
