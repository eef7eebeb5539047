package leader_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fleetmq/fleet/hub/leader"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/etcdtest"
)

const ttl = 2 * time.Second

// hub is one campaigner: its elector, the context its term got, and how
// its Run ended.
type hub struct {
	id    string
	e     *leader.Elector
	cli   *clientv3.Client
	stop  context.CancelFunc
	term  chan context.Context // the term's context, once per term
	done  chan struct{}        // closed when Run returned, with err
	err   error
	terms atomic.Int32
}

func newClient(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// start campaigns as id on cli until the test ends or stop is called; the
// term runs until its context ends.
func start(t *testing.T, cli *clientv3.Client, prefix, id string) *hub {
	t.Helper()
	e, err := leader.New(leader.Options{Client: cli, Prefix: prefix, LeaseTTL: ttl,
		Member: schema.HubMember{ID: id, APIURL: "http://" + id}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	h := &hub{id: id, e: e, cli: cli, stop: stop, term: make(chan context.Context, 4), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		h.err = e.Run(ctx, func(ctx context.Context) error {
			h.terms.Add(1)
			h.term <- ctx
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-h.done:
		case <-time.After(15 * time.Second):
			t.Errorf("%s: Run did not return after its context ended", id)
		}
	})
	return h
}

// awaitLeader polls until exactly one of hubs leads and returns it,
// failing if two ever lead at once.
func awaitLeader(t *testing.T, hubs ...*hub) *hub {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var leaders []*hub
		for _, h := range hubs {
			if h.e.IsLeader() {
				leaders = append(leaders, h)
			}
		}
		if len(leaders) > 1 {
			t.Fatalf("%d hubs lead at once: %s and %s", len(leaders), leaders[0].id, leaders[1].id)
		}
		if len(leaders) == 1 {
			return leaders[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no leader within 20 s")
	return nil
}

// TestOneLeaderAmongThree: of three campaigners one leads, the others
// wait; the registrations list all three, the leader first, with their
// leases.
func TestOneLeaderAmongThree(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	const prefix = "/fleet-one/"
	hubs := []*hub{
		start(t, newClient(t, c.Endpoints()...), prefix, "hub-a"),
		start(t, newClient(t, c.Endpoints()...), prefix, "hub-b"),
		start(t, newClient(t, c.Endpoints()...), prefix, "hub-c"),
	}
	l := awaitLeader(t, hubs...)
	// Standbys stay standbys for a while (several renewals).
	for range 3 * 10 {
		if got := awaitLeader(t, hubs...); got != l {
			t.Fatalf("leader moved from %s to %s with nobody gone", l.id, got.id)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var list schema.HubMemberList
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if list, err = leader.Members(ctx, newClient(t, c.Endpoints()...), prefix); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(list.Items) != 3 || list.Leader != l.id || !list.Items[0].Leader || list.Items[0].ID != l.id {
		t.Fatalf("members: %+v, want 3 with %s leading, first", list, l.id)
	}
	for _, m := range list.Items {
		if m.LeaseTTLSeconds != 2 || m.LeaseRemainingSeconds < 0 || m.LeaseRemainingSeconds > 2 || m.Lease == "" || m.Started.IsZero() {
			t.Errorf("member %+v: want its lease (TTL 2 s, remaining 0-2 s) and start", m)
		}
		if m.ID != l.id && m.Leader {
			t.Errorf("member %s marked leader besides %s", m.ID, l.id)
		}
	}
}

// TestTakeover: a leader that stops (its session closes) hands over at
// once; one whose lease is revoked loses its term (ErrLostLeadership) and
// a standby takes over.
func TestTakeover(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	const prefix = "/fleet-takeover/"
	a := start(t, newClient(t, c.Endpoints()...), prefix, "hub-a")
	l := awaitLeader(t, a)
	b := start(t, newClient(t, c.Endpoints()...), prefix, "hub-b")
	cc := start(t, newClient(t, c.Endpoints()...), prefix, "hub-c")

	// A clean stop resigns.
	began := time.Now()
	l.stop()
	if <-l.done; l.err != nil {
		t.Fatalf("stopped leader's Run: %v, want nil", l.err)
	}
	next := awaitLeader(t, b, cc)
	t.Logf("takeover after a clean stop: %s", time.Since(began).Round(time.Millisecond))

	// A revoked lease ends the term.
	termCtx := <-next.term
	lease := leaseOf(t, c, prefix, next.id)
	began = time.Now()
	if _, err := newClient(t, c.Endpoints()...).Revoke(t.Context(), lease); err != nil {
		t.Fatal(err)
	}
	select {
	case <-termCtx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the term of a leader whose lease was revoked did not end")
	}
	if <-next.done; !errors.Is(next.err, leader.ErrLostLeadership) {
		t.Fatalf("Run of the deposed leader: %v, want ErrLostLeadership", next.err)
	}
	if next.e.IsLeader() {
		t.Fatal("deposed leader still says it leads")
	}
	last := b
	if next == b {
		last = cc
	}
	if got := awaitLeader(t, b, cc); got != last {
		t.Fatalf("leader %s, want %s", got.id, last.id)
	}
	t.Logf("takeover after a revoked lease: %s", time.Since(began).Round(time.Millisecond))
}

// leaseOf reads the lease the hub registered under.
func leaseOf(t *testing.T, c *etcdtest.Cluster, prefix, id string) clientv3.LeaseID {
	t.Helper()
	resp, err := newClient(t, c.Endpoints()...).Get(t.Context(), leader.MembersPrefix(prefix)+id)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("registration of %s: %v", id, err)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// openStore opens a store on etcd at endpoints, with the Secrets key of
// keyDir (every hub of a fleet shares it).
func openStore(t *testing.T, endpoints []string, prefix, keyDir string) (*store.Store, string) {
	t.Helper()
	dir := t.TempDir()
	if keyDir != "" {
		key, err := os.ReadFile(filepath.Join(keyDir, store.SecretKeyFileName))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, store.SecretKeyFileName), key, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	st, err := store.Open(store.Options{Dir: filepath.Join(dir, "store"), GCInterval: -1,
		Etcd: &store.EtcdOptions{Endpoints: endpoints, Prefix: prefix, RequestTimeout: 3 * time.Second, DialTimeout: 3 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, dir
}

func setKey(ctx context.Context, st *store.Store, key, val string) error {
	_, err := st.Write(ctx, func(t *store.Txn) error { return t.Set(key, []byte(val)) })
	return err
}

func getKey(t *testing.T, st *store.Store, key string) string {
	t.Helper()
	var v []byte
	err := st.View(t.Context(), func(t *store.Txn) error {
		var err error
		v, err = t.Get(key)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(v)
}

// TestFencedCommitAfterRevokedLease: a leader's commits carry its fence;
// once its lease is revoked and another hub leads, a commit with the old
// term's context fails with ErrNotLeader and writes nothing, while an
// unfenced (API) write still goes through.
func TestFencedCommitAfterRevokedLease(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	const prefix = "/fleet-fence/"
	stA, _ := openStore(t, c.Endpoints(), prefix, "")
	cliA, _, ok := stA.EtcdClient()
	if !ok {
		t.Fatal("store on etcd has no etcd client")
	}
	a := start(t, cliA, prefix, "hub-a")
	termA := <-a.term
	if err := setKey(termA, stA, "v1/test/fence", "a1"); err != nil {
		t.Fatalf("leader's fenced commit: %v", err)
	}
	b := start(t, newClient(t, c.Endpoints()...), prefix, "hub-b")
	if _, err := newClient(t, c.Endpoints()...).Revoke(t.Context(), leaseOf(t, c, prefix, "hub-a")); err != nil {
		t.Fatal(err)
	}
	<-b.term // b leads: a's election key is gone
	// The old term's context, its cancellation removed: the fence alone
	// must refuse the write.
	stale := context.WithoutCancel(termA)
	err := setKey(stale, stA, "v1/test/fence", "a2")
	if !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("deposed leader's commit: %v, want ErrNotLeader", err)
	}
	t.Logf("refused: %v", err)
	if got := getKey(t, stA, "v1/test/fence"); got != "a1" {
		t.Fatalf("key after the refused commit: %q, want a1", got)
	}
	if err := setKey(t.Context(), stA, "v1/test/api", "any hub"); err != nil {
		t.Fatalf("unfenced write on the deposed hub: %v", err)
	}
}

// TestPartitionedLeaderStopsAndIsFenced: a leader cut off from etcd (a TCP
// proxy between its client and the cluster) ends its term before its
// lease does; the other hub takes over; once the partition heals, a
// commit under the old term fails with ErrNotLeader.
func TestPartitionedLeaderStopsAndIsFenced(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	const prefix = "/fleet-partition/"
	var proxies []*tcpProxy
	var eps []string
	for _, ep := range c.HostPorts() {
		p := startProxy(t, ep)
		proxies = append(proxies, p)
		eps = append(eps, "http://"+p.addr)
	}
	stA, dirA := openStore(t, eps, prefix, "")
	cliA, _, _ := stA.EtcdClient()
	a := start(t, cliA, prefix, "hub-a")
	termA := <-a.term
	stB, _ := openStore(t, c.Endpoints(), prefix, dirA)
	cliB, _, _ := stB.EtcdClient()
	b := start(t, cliB, prefix, "hub-b")
	awaitLeader(t, a, b)

	cut := time.Now()
	for _, p := range proxies {
		p.partition(true)
	}
	var stopped time.Duration
	select {
	case <-termA.Done():
		stopped = time.Since(cut)
	case <-time.After(3 * ttl):
		t.Fatal("partitioned leader did not end its term")
	}
	t.Logf("partitioned leader stepped down %s after the cut (lease TTL %s): %v", stopped.Round(time.Millisecond), ttl, context.Cause(termA))
	<-b.term
	t.Logf("standby leads %s after the cut", time.Since(cut).Round(time.Millisecond))
	for _, p := range proxies {
		p.partition(false)
	}
	if <-a.done; !errors.Is(a.err, leader.ErrLostLeadership) {
		t.Fatalf("Run of the partitioned leader: %v, want ErrLostLeadership", a.err)
	}
	// Healed, the old term's commit reaches etcd and is refused by the
	// fence (retried while the client reconnects).
	stale := context.WithoutCancel(termA)
	deadline := time.Now().Add(20 * time.Second)
	var err error
	for {
		err = setKey(stale, stA, "v1/test/partition", "late")
		if errors.Is(err, store.ErrNotLeader) || err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("commit of the partitioned leader's term after the heal: %v, want ErrNotLeader", err)
	}
	if got := getKey(t, stB, "v1/test/partition"); got != "" {
		t.Fatalf("the fenced commit was written: %q", got)
	}
}

// tcpProxy forwards loopback connections to target; partition closes
// them all and refuses new ones.
type tcpProxy struct {
	addr, target string
	ln           net.Listener
	cut          atomic.Bool
	mu           sync.Mutex
	conns        map[net.Conn]bool
}

func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.partition(true) })
	return p
}

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.cut.Load() {
			c.Close()
			continue
		}
		go p.forward(c)
	}
}

func (p *tcpProxy) forward(c net.Conn) {
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.cut.Load() {
		p.mu.Unlock()
		c.Close()
		u.Close()
		return
	}
	p.conns[c], p.conns[u] = true, true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(u, c); u.Close() }()
	_, _ = io.Copy(c, u)
	c.Close()
}

func (p *tcpProxy) partition(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut.Store(on)
	if on {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}
