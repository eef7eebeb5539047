package broker_test

import (
	"net"
	"testing"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/brokertest"
)

// startHeldBroker runs an embedded broker that holds connections for
// hold or until Admit.
func startHeldBroker(t *testing.T, hold time.Duration) *broker.Broker {
	t.Helper()
	auth := broker.NewStaticAuth()
	for _, a := range testAccounts() {
		auth.Set(a.Identity, a.Password)
	}
	return brokertest.Start(t, broker.Options{
		Addr: "127.0.0.1:0", Auth: auth, Topics: topics, Logger: testLogger(t),
		HoldConnections: hold, ConnectTimeout: 200 * time.Millisecond,
	})
}

// dialAsync starts a device's connect and returns where its result lands.
func dialAsync(t *testing.T, b *broker.Broker) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := dial(t, brokerURL(b), dev1.Name, passwordOf(dev1.Name), clientOpts{})
		done <- err
	}()
	return done
}

// TestHoldConnectionsUntilAdmit: a held device's TCP connection is
// accepted at once (the kernel's backlog is not where it waits), but it
// gets no CONNACK before Admit, and it gets one after, even though it
// waited longer than the broker's ConnectTimeout.
func TestHoldConnectionsUntilAdmit(t *testing.T) {
	b := startHeldBroker(t, time.Hour)
	done := dialAsync(t, b)
	// The connect is held: it neither succeeds nor fails while held,
	// past the connect timeout (200 ms) the broker would apply to an
	// unheld connection.
	select {
	case err := <-done:
		t.Fatalf("connect finished before Admit: %v", err)
	case <-time.After(time.Second):
	}
	b.Admit()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("connect after Admit: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no CONNACK after Admit")
	}
	// Later devices are served at once.
	if _, err := dial(t, brokerURL(b), dev2.Name, passwordOf(dev2.Name), clientOpts{}); err != nil {
		t.Fatalf("connect after Admit: %v", err)
	}
	b.Admit() // twice is harmless
}

// TestHoldConnectionsRunsOut: without Admit, a held connection is served
// once the hold runs out.
func TestHoldConnectionsRunsOut(t *testing.T) {
	b := startHeldBroker(t, 300*time.Millisecond)
	start := time.Now()
	if err := <-dialAsync(t, b); err != nil {
		t.Fatalf("connect after the hold ran out: %v", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("connected after %v, before the 300ms hold ran out", d)
	}
}

// TestHoldConnectionsClose: closing a broker that holds connections
// closes them and returns.
func TestHoldConnectionsClose(t *testing.T) {
	b := startHeldBroker(t, time.Hour)
	conn, err := net.DialTimeout("tcp", b.Addr().String(), waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Close hangs on a held connection")
	}
	if err := conn.SetReadDeadline(time.Now().Add(waitTimeout)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Error("the held connection is still open after Close")
	}
}
