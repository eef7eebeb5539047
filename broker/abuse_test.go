package broker_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/brokertest"
	"github.com/fleetmq/fleet/broker/ratelimit"
	"github.com/fleetmq/fleet/edgeagent/status"
	"github.com/fleetmq/fleet/schema"
)

// manualClock is a clock the test moves by hand.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// cutOffs counts Options.OnClientCutOff calls by reason.
type cutOffs struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *cutOffs) add(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[reason]++
}

func (c *cutOffs) get(reason string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[reason]
}

// connectV5 sends an MQTT 5 CONNECT over a raw connection and returns the
// CONNACK's reason code.
func connectV5(t *testing.T, addr, username, password string) byte {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(waitTimeout)); err != nil {
		t.Fatal(err)
	}
	pk := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Connect},
		ProtocolVersion: 5,
		Connect: packets.ConnectParams{
			ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30,
			ClientIdentifier: "raw-v5-" + username,
			UsernameFlag:     true, Username: []byte(username),
			PasswordFlag: true, Password: []byte(password),
		},
	}
	var buf bytes.Buffer
	if err := pk.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	var fh packets.FixedHeader
	b, err := r.ReadByte()
	if err != nil {
		t.Fatalf("read CONNACK: %v", err)
	}
	if err := fh.Decode(b); err != nil || fh.Type != packets.Connack {
		t.Fatalf("first packet %+v (%v), want CONNACK", fh, err)
	}
	n, _, err := packets.DecodeLength(r)
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, n)
	if _, err := r.Read(body); err != nil || len(body) < 2 {
		t.Fatalf("read CONNACK body: %v", err)
	}
	return body[1]
}

// TestEmbeddedAuthThrottle: after the burst of failed logins from one
// address, further attempts are refused unchecked (MQTT 5: quota
// exceeded), while a device whose token worked before still connects
// from that address; a credential never seen waits for the refill.
func TestEmbeddedAuthThrottle(t *testing.T) {
	clk := &manualClock{now: time.Unix(1_800_000_000, 0)}
	limiter := ratelimit.NewAuthLimiter(ratelimit.AuthOptions{Now: clk.Now})
	auth := broker.NewStaticAuth()
	for _, a := range testAccounts() {
		auth.Set(a.Identity, a.Password)
	}
	b := brokertest.Start(t, broker.Options{Addr: "127.0.0.1:0", Auth: auth, Topics: topics, Logger: testLogger(t), AuthLimiter: limiter})
	url := brokerURL(b)

	// dev1 has connected before the attack.
	c := mustDial(t, url, dev1)
	c.c.Disconnect(0)

	for i := range 30 {
		if _, err := dial(t, url, dev1.Name, "wrong", clientOpts{}); err == nil {
			t.Fatalf("wrong password %d accepted", i)
		}
	}
	if s := limiter.Stats(); s.Failures != ratelimit.DefaultAuthBurst || s.Throttled != 30-ratelimit.DefaultAuthBurst {
		t.Fatalf("after 30 wrong passwords: %+v, want %d failures and the rest throttled", s, ratelimit.DefaultAuthBurst)
	}
	if code := connectV5(t, b.Addr().String(), dev2.Name, "wrong"); code != packets.ErrQuotaExceeded.Code {
		t.Errorf("MQTT 5 CONNACK %#x while throttled, want quota exceeded %#x", code, packets.ErrQuotaExceeded.Code)
	}

	// The known device gets in; dev2, never seen, does not yet.
	mustDial(t, url, dev1)
	if _, err := dial(t, url, dev2.Name, passwordOf(dev2.Name), clientOpts{}); err == nil {
		t.Error("a new credential was checked from a throttled address")
	}
	// A second later one credential is checked: dev2's, good, gives its
	// token back; one wrong guess is then checked, the next one is not.
	clk.Advance(time.Second)
	mustDial(t, url, dev2)
	if code := connectV5(t, b.Addr().String(), dev2.Name, "wrong"); code != packets.ErrBadUsernameOrPassword.Code {
		t.Errorf("MQTT 5 CONNACK %#x after a refill, want bad username or password %#x", code, packets.ErrBadUsernameOrPassword.Code)
	}
	if code := connectV5(t, b.Addr().String(), dev2.Name, "wrong"); code != packets.ErrQuotaExceeded.Code {
		t.Errorf("MQTT 5 CONNACK %#x, want quota exceeded again", code)
	}
}

// TestEmbeddedPublishFloodCutOff: a device publishing over its rate is
// disconnected, and again at once when it reconnects and goes on; another
// device and the hub's account are not affected; a device's answers to
// requests have their own bucket; an oversize packet cuts its sender off.
func TestEmbeddedPublishFloodCutOff(t *testing.T) {
	auth := broker.NewStaticAuth()
	for _, a := range testAccounts() {
		auth.Set(a.Identity, a.Password)
	}
	var cut cutOffs
	b := brokertest.Start(t, broker.Options{
		Addr: "127.0.0.1:0", Auth: auth, Topics: topics, Logger: testLogger(t),
		PublishRate:    ratelimit.Rate{Burst: 20, PerSecond: 0.001},
		ResponseRate:   ratelimit.Rate{Burst: 5, PerSecond: 0.001},
		MaxPacketSize:  4096,
		OnClientCutOff: cut.add,
	})
	url := brokerURL(b)
	mon := mustDial(t, url, monitorID)
	mon.mustSubscribe(topics.DeviceFilter(schema.TopicEvents))

	flooder := mustDial(t, url, dev1)
	// The responses bucket is separate: 5 answers pass, the status
	// bucket is untouched by them.
	for range 5 {
		flooder.publish(topics.Device(dev1.Name, schema.TopicResponses), 0, false, "chunk")
	}
	for range 20 {
		flooder.publish(topics.Device(dev1.Name, schema.TopicEvents), 0, false, "flood")
	}
	for range 20 {
		mon.expectLive(topics.Device(dev1.Name, schema.TopicEvents), "flood")
		mon.seen = map[[2]string]bool{}
	}
	flooder.c.Publish(topics.Device(dev1.Name, schema.TopicEvents), 0, false, "one too many")
	flooder.awaitLost()
	if n := cut.get(broker.CutOffPublishRate); n != 1 {
		t.Fatalf("%d publish_rate cut-offs, want 1", n)
	}

	// The other device and the hub's account carry on.
	other := mustDial(t, url, dev2)
	other.publish(topics.Device(dev2.Name, schema.TopicEvents), 1, false, "still here")
	mon.expectLive(topics.Device(dev2.Name, schema.TopicEvents), "still here")
	hub := mustDial(t, url, hubID)
	for range 50 {
		hub.publish(topics.Device(dev2.Name, schema.TopicDesired), 0, false, "{}")
	}
	hub.publish(topics.Device(dev2.Name, schema.TopicEvents), 1, false, "hub is exempt")

	// The bucket outlives the connection.
	again := mustDial(t, url, dev1)
	again.c.Publish(topics.Device(dev1.Name, schema.TopicStatus), 0, false, "{}")
	again.awaitLost()
	if n := cut.get(broker.CutOffPublishRate); n != 2 {
		t.Fatalf("%d publish_rate cut-offs after the reconnect, want 2", n)
	}

	// Over the responses bucket.
	resp := mustDial(t, url, dev2)
	for range 5 {
		resp.publish(topics.Device(dev2.Name, schema.TopicResponses), 0, false, "chunk")
	}
	resp.c.Publish(topics.Device(dev2.Name, schema.TopicResponses), 0, false, "chunk")
	resp.awaitLost()
	if n := cut.get(broker.CutOffResponseRate); n != 1 {
		t.Fatalf("%d response_rate cut-offs, want 1", n)
	}

	// An oversize packet.
	big := mustDial(t, url, monitorID)
	big.c.Publish(topics.Device(dev2.Name, schema.TopicEvents), 0, false, strings.Repeat("x", 8192))
	big.awaitLost()
	// Counted when mochi ends the session, just after it closed the
	// connection.
	for deadline := time.Now().Add(waitTimeout); cut.get(broker.CutOffPacketTooLarge) != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d packet_too_large cut-offs, want 1", cut.get(broker.CutOffPacketTooLarge))
		}
	}
	mon.mustSubscribe(topics.DeviceFilter(schema.TopicStatus))
	if !mon.c.IsConnectionOpen() {
		t.Error("the monitor was disconnected by the others' abuse")
	}
}

// TestPublishBurstCoversOfflineQueue: an agent that reconnects flushes its
// whole offline event queue with its status and online flag at once; the
// publish limit must let that through, twice over (a reconnect mid-flush
// sends the unacknowledged rest again).
func TestPublishBurstCoversOfflineQueue(t *testing.T) {
	need := 2 * (status.DefaultEventQueueSize + 2)
	if got := broker.DefaultPublishRate.Burst; got < float64(need) {
		t.Errorf("DefaultPublishRate.Burst = %v, want at least %d (agent offline event queue %d, twice, with status and online)", got, need, status.DefaultEventQueueSize)
	}
}

// TestEmbeddedLoginRefusedReported: every refused login reaches
// OnLoginRefused with its username, address and result ("refused" for
// bad credentials, "throttled" once the address failed too often),
// never the password; good logins do not.
func TestEmbeddedLoginRefusedReported(t *testing.T) {
	clk := &manualClock{now: time.Unix(1_800_000_000, 0)}
	auth := broker.NewStaticAuth()
	for _, a := range testAccounts() {
		auth.Set(a.Identity, a.Password)
	}
	var mu sync.Mutex
	var got []broker.LoginRefusal
	b := brokertest.Start(t, broker.Options{
		Addr: "127.0.0.1:0", Auth: auth, Topics: topics, Logger: testLogger(t),
		AuthLimiter: ratelimit.NewAuthLimiter(ratelimit.AuthOptions{Now: clk.Now}),
		OnLoginRefused: func(r broker.LoginRefusal) {
			mu.Lock()
			got = append(got, r)
			mu.Unlock()
		},
	})
	url := brokerURL(b)
	mustDial(t, url, dev1)
	const n = ratelimit.DefaultAuthBurst + 3
	for i := range n {
		if _, err := dial(t, url, dev2.Name, "wrong-secret", clientOpts{}); err == nil {
			t.Fatalf("wrong password %d accepted", i)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	count := map[string]int{}
	for _, r := range got {
		count[r.Result]++
		if r.Username != dev2.Name || !strings.HasPrefix(r.Remote, "127.0.0.1:") || r.Reason == "" || strings.Contains(r.Reason, "wrong-secret") {
			t.Errorf("refusal %+v", r)
		}
	}
	if count[broker.LoginRefused] != ratelimit.DefaultAuthBurst || count[broker.LoginThrottled] != n-ratelimit.DefaultAuthBurst || len(got) != n {
		t.Fatalf("refusals %v (%d), want %d refused and %d throttled", count, len(got), ratelimit.DefaultAuthBurst, n-ratelimit.DefaultAuthBurst)
	}
}

// TestHubTrafficCreditsDevice: a device answering a burst of its hub's
// desired states (a status and an event each, four times its burst in
// all) is not cut off, because each message the hub sends it earns the
// answers back; the same device flooding ten times its burst on its own
// still is, at once.
func TestHubTrafficCreditsDevice(t *testing.T) {
	auth := broker.NewStaticAuth()
	for _, a := range testAccounts() {
		auth.Set(a.Identity, a.Password)
	}
	var cut cutOffs
	const burst = 20
	b := brokertest.Start(t, broker.Options{
		Addr: "127.0.0.1:0", Auth: auth, Topics: topics, Logger: testLogger(t),
		PublishRate:    ratelimit.Rate{Burst: burst, PerSecond: 0.001},
		OnClientCutOff: cut.add,
	})
	dev := mustDial(t, brokerURL(b), dev1)
	desiredTopic := topics.Device(dev1.Name, schema.TopicDesired)
	dev.mustSubscribe(desiredTopic)
	for i := range 2 * burst {
		payload := fmt.Sprintf(`{"generation":%d}`, i+1)
		if err := b.Publish(desiredTopic, []byte(payload), false); err != nil {
			t.Fatal(err)
		}
		dev.expect(desiredTopic, payload)
		dev.publish(topics.Device(dev1.Name, schema.TopicStatus), 1, true, payload)
		dev.publish(topics.Device(dev1.Name, schema.TopicEvents), 1, false, payload)
	}
	if n := cut.get(broker.CutOffPublishRate); n != 0 || !dev.c.IsConnectionOpen() {
		t.Fatalf("device answering its hub: %d cut-offs (connected %v), want none", n, dev.c.IsConnectionOpen())
	}

	for i := range 10 * burst {
		dev.c.Publish(topics.Device(dev1.Name, schema.TopicEvents), 0, false, fmt.Sprint("flood ", i))
	}
	dev.awaitLost()
	if n := cut.get(broker.CutOffPublishRate); n != 1 {
		t.Fatalf("%d publish_rate cut-offs after a flood of ten bursts, want 1", n)
	}
}
