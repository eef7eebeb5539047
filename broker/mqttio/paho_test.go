package mqttio

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
)

// TestClientOptions: the shared settings are set, and paho connects
// through open, not through a dialler of its own.
func TestClientOptions(t *testing.T) {
	errDial := errors.New("dial refused by the test")
	var opened atomic.Int32
	open := func() (net.Conn, error) {
		opened.Add(1)
		return nil, errDial
	}
	opts := ClientOptions("tcp://hub:1883", "pi-1-x", "pi-1", "s3cret", 7*time.Second, open)
	r := paho.NewOptionsReader(opts)
	got := fmt.Sprintf("%s %s %s %s v%d clean=%t order=%t reconnect=%t retry=%t connect=%s write=%s",
		r.Servers()[0], r.ClientID(), r.Username(), r.Password(), r.ProtocolVersion(), r.CleanSession(),
		r.Order(), r.AutoReconnect(), r.ConnectRetry(), r.ConnectTimeout(), r.WriteTimeout())
	want := "tcp://hub:1883 pi-1-x pi-1 s3cret v4 clean=true order=false reconnect=false retry=false connect=7s write=7s"
	if got != want {
		t.Errorf("options:\n got %s\nwant %s", got, want)
	}

	c := paho.NewClient(opts)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := WaitToken(ctx, c.Connect()); !errors.Is(err, errDial) {
		t.Errorf("Connect = %v, want the error of open", err)
	}
	if n := opened.Load(); n != 1 {
		t.Errorf("open called %d times, want once", n)
	}
}

func TestIsNotAuthorized(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{packets.ErrorRefusedNotAuthorised, true},
		{fmt.Errorf("connect: %w", packets.ErrorRefusedBadUsernameOrPassword), true},
		{packets.ErrorRefusedServerUnavailable, false},
		{context.DeadlineExceeded, false},
		{nil, false},
	} {
		if got := IsNotAuthorized(tt.err); got != tt.want {
			t.Errorf("IsNotAuthorized(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// pendingToken is a paho token that never completes.
type pendingToken struct{}

func (pendingToken) Wait() bool                     { select {} }
func (pendingToken) WaitTimeout(time.Duration) bool { return false }
func (pendingToken) Done() <-chan struct{}          { return nil }
func (pendingToken) Error() error                   { return nil }

// TestWaitTokenStopsWithCtx: a token that never completes does not hold
// WaitToken past its context.
func TestWaitTokenStopsWithCtx(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := WaitToken(ctx, pendingToken{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitToken = %v, want context.Canceled", err)
	}
}
