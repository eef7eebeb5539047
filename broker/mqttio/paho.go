package mqttio

import (
	"context"
	"errors"
	"net"
	"net/url"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
)

// ClientOptions returns the paho options the edge agent's clients share
// (its session, enrolment and `fleet-agent check`): MQTT 3.1.1 and a clean
// session under clientID; no reconnecting or retrying by paho, whose
// backoff has no jitter (callers retry with their own); each message
// handed to its handler on a goroutine of its own, off paho's router (so
// handlers run concurrently, in no set order); connecting and each write
// bounded by timeout; and the network connection from open, which dials
// it (Dial, with the caller's context), instead of paho's own dialler.
// Callers add what is theirs: keepalive, will, handlers.
func ClientOptions(server, clientID, username, password string, timeout time.Duration, open func() (net.Conn, error)) *paho.ClientOptions {
	return paho.NewClientOptions().
		AddBroker(server).
		SetClientID(clientID).
		SetUsername(username).
		SetPassword(password).
		SetProtocolVersion(4).
		SetCleanSession(true).
		SetOrderMatters(false).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetConnectTimeout(timeout).
		SetWriteTimeout(timeout).
		SetCustomOpenConnectionFn(func(*url.URL, paho.ClientOptions) (net.Conn, error) { return open() })
}

// WaitToken waits until paho's token completes or ctx is done.
func WaitToken(ctx context.Context, t paho.Token) error {
	select {
	case <-t.Done():
		return t.Error()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// IsNotAuthorized recognises paho's CONNACK refusals of credentials.
func IsNotAuthorized(err error) bool {
	return errors.Is(err, packets.ErrorRefusedNotAuthorised) || errors.Is(err, packets.ErrorRefusedBadUsernameOrPassword)
}
