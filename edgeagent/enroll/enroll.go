// Package enroll registers a device with the hub using a bootstrap token,
// so that many devices can start from one SD-card image: each asks the
// hub, over MQTT, for a device of its own name and its own token, stores
// the token (0600) in its state directory and never uses the bootstrap
// token again. The wire protocol is in schema/enroll.go.
//
// The request (ID and secret) is written to the state directory before it
// is sent, so an agent that loses the answer (a dropped connection, a
// crash) sends the same request again and the hub, which recognises it,
// answers with a new token for the device that request created.
package enroll

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/broker/mqttio"
	"github.com/fleetmq/fleet/edgeagent/backoff"
	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/edgeagent/trust"
	"github.com/fleetmq/fleet/schema"
)

// Files in the agent's state directory.
const (
	// TokenFile holds the device token (mode 0600), once enrolled.
	TokenFile = "token"
	// DeviceFile holds the enrolled device's name.
	DeviceFile = "device"
	// RequestFile holds the pending enrollment request (mode 0600): its ID
	// and secret, so a retry is recognised.
	RequestFile = "enroll-request.json"
)

// Identity is a device's name and token.
type Identity struct {
	Device string
	Token  string
}

// Stored returns the identity an earlier enrollment saved in stateDir. The
// error wraps fs.ErrNotExist when the device has not enrolled.
func Stored(stateDir string) (Identity, error) {
	tok, err := os.ReadFile(filepath.Join(stateDir, TokenFile))
	if err != nil {
		return Identity{}, fmt.Errorf("stored device token: %w", err)
	}
	dev, err := os.ReadFile(filepath.Join(stateDir, DeviceFile))
	if err != nil {
		return Identity{}, fmt.Errorf("stored device token: its device name: %w", err)
	}
	id := Identity{Device: strings.TrimSpace(string(dev)), Token: strings.TrimSpace(string(tok))}
	if id.Token == "" {
		return Identity{}, fmt.Errorf("stored device token: %s is empty", filepath.Join(stateDir, TokenFile))
	}
	if err := schema.ValidateName(id.Device); err != nil {
		return Identity{}, fmt.Errorf("stored device name in %s: %w", filepath.Join(stateDir, DeviceFile), err)
	}
	return id, nil
}

// save writes the identity: the name first, so a token file always has
// its name beside it; then the token, 0600; then forgets the request.
func save(stateDir string, id Identity) error {
	if err := state.WriteFileAtomic(filepath.Join(stateDir, DeviceFile), []byte(id.Device+"\n"), 0o644); err != nil {
		return fmt.Errorf("save device name: %w", err)
	}
	if err := state.WriteFileAtomic(filepath.Join(stateDir, TokenFile), []byte(id.Token+"\n"), 0o600); err != nil {
		return fmt.Errorf("save device token: %w", err)
	}
	if err := os.Remove(filepath.Join(stateDir, RequestFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("forget enrollment request: %w", err)
	}
	return nil
}

// Options configure an enrollment.
type Options struct {
	// Broker is the MQTT broker URL, as for the agent.
	Broker string
	// Brokers, if set, are several broker URLs (Broker is then ignored):
	// Run's attempts go to each in turn, round-robin, so a device enrolls
	// through whichever hub accepts it (a standby hub's broker refuses).
	Brokers []string
	// TLSConfig verifies every broker, each for its own name (ForBroker).
	TLSConfig *tls.Config
	Topics    schema.Topics
	// BootstrapToken is the token of `fleet token create`.
	BootstrapToken string
	// Device is the name to ask for (see DeviceName).
	Device string
	// StateDir is the agent's state directory: the token is saved there.
	StateDir string
	// PublicKey is the device's public key (devicekey), sent with the
	// request so that the hub can seal Secrets to the device before its
	// first status; "" sends none.
	PublicKey string
	// SigningKey is the hub's signing key the agent pinned already (its
	// --join string or --hub-signing-key); nil: none. The key of the
	// answer must be it: another one is refused, and nothing is saved.
	SigningKey ed25519.PublicKey
	// InsecureTrustFirstKey pins the answer's signing key even when it
	// came over a plain connection (any broker on the way could have
	// written it). Default false: over plain MQTT the key is not pinned.
	InsecureTrustFirstKey bool
	Logger                *slog.Logger
	// Timeout bounds one attempt: connect, subscribe, send, answer.
	// Default 30 s.
	Timeout time.Duration
	// Backoff spaces the attempts of Run (default 2 s doubling to 2 min,
	// jittered: a room of devices switched on together spreads out).
	Backoff backoff.Policy
	// Seed feeds the jitter (0: random).
	Seed uint64
}

func (o *Options) check() error {
	if len(o.Brokers) == 0 {
		o.Brokers = []string{o.Broker}
	}
	if _, err := schema.CheckBrokerList(o.Brokers); err != nil {
		return fmt.Errorf("enroll: %w", err)
	}
	o.Broker = o.Brokers[0]
	if _, err := schema.ParseBootstrapToken(o.BootstrapToken); err != nil {
		return fmt.Errorf("enroll: bootstrap token: %w", err)
	}
	if err := schema.ValidateName(o.Device); err != nil {
		return fmt.Errorf("enroll: device name: %w", err)
	}
	if o.StateDir == "" {
		return errors.New("enroll: no state directory")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Backoff == (backoff.Policy{}) {
		o.Backoff = backoff.Policy{Initial: 2 * time.Second, Max: 2 * time.Minute, Jitter: 0.5}
	}
	return nil
}

// RefusedError is the hub's refusal of an enrollment.
type RefusedError struct {
	Device string
	// Reason is one of schema.EnrollUnauthorized, EnrollExpired…
	Reason  string
	Message string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("enroll %s: the hub refused (%s): %s", e.Device, e.Reason, e.Message)
}

// Temporary reports whether trying again may succeed without a change on
// the operator's side.
func (e *RefusedError) Temporary() bool { return e.Reason == schema.EnrollInternalError }

// ErrBrokerRefused: the broker did not accept the bootstrap token itself
// (unknown or deleted) or the connection's form.
var ErrBrokerRefused = errors.New("the broker refused the bootstrap client (is the bootstrap token unknown or deleted?)")

// request is what RequestFile holds.
type request struct {
	ID     string `json:"id"`
	Secret string `json:"secret"`
	Device string `json:"device"`
	// TokenID is the public half of the bootstrap token it was made for.
	TokenID string `json:"tokenID"`
	// csr is the PEM request for the device's client certificate, made
	// for each attempt (the key stays in the state directory).
	csr string
}

// pending returns the saved request for this device and bootstrap token,
// or saves a new one.
func pending(o Options, tokenID string) (request, error) {
	p := filepath.Join(o.StateDir, RequestFile)
	if b, err := os.ReadFile(p); err == nil {
		var r request
		if json.Unmarshal(b, &r) == nil && r.Device == o.Device && r.TokenID == tokenID &&
			schema.ValidateRequestID(r.ID) == nil && len(r.Secret) >= 32 {
			return r, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return request{}, fmt.Errorf("read enrollment request: %w", err)
	}
	r := request{Device: o.Device, TokenID: tokenID}
	var b [16 + 32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return request{}, fmt.Errorf("new enrollment request: %w", err)
	}
	r.ID = schema.RequestIDPrefix + base64.RawURLEncoding.EncodeToString(b[:16])
	r.Secret = base64.RawURLEncoding.EncodeToString(b[16:])
	raw, err := json.Marshal(r)
	if err != nil {
		return request{}, err
	}
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return request{}, fmt.Errorf("save enrollment request: %w", err)
	}
	if err := state.WriteFileAtomic(p, raw, 0o600); err != nil {
		return request{}, fmt.Errorf("save enrollment request: %w", err)
	}
	return r, nil
}

// Enroll makes one attempt: it sends the enrollment request (the pending
// one, if an earlier attempt saved one for this device and token), waits
// for the answer and saves the identity. A refusal is a *RefusedError;
// after a refusal that is not Temporary the pending request is dropped.
func Enroll(ctx context.Context, o Options) (Identity, error) {
	if err := o.check(); err != nil {
		return Identity{}, err
	}
	tokenID, _ := schema.ParseBootstrapToken(o.BootstrapToken)
	req, err := pending(o, tokenID)
	if err != nil {
		return Identity{}, err
	}
	log := o.Logger.With("device", o.Device, "bootstrap_token", tokenID, "request", req.ID)
	// Every enrollment asks for a client certificate; a hub without its
	// own CA ignores the request.
	if csr, err := ClientCSR(o.StateDir, o.Device); err != nil {
		log.Warn("enrolling without a client certificate request", "err", err)
	} else {
		req.csr = string(csr)
	}
	log.Info("enrolling with the hub", "broker", o.Broker)
	resp, err := exchange(ctx, o, req)
	if err != nil {
		return Identity{}, fmt.Errorf("enroll %s: %w", o.Device, err)
	}
	if resp.Token == "" || resp.Reason != "" {
		ref := &RefusedError{Device: o.Device, Reason: resp.Reason, Message: resp.Message}
		if ref.Reason == "" {
			ref.Reason, ref.Message = schema.EnrollInternalError, "the hub answered without a token"
		}
		if !ref.Temporary() {
			if err := os.Remove(filepath.Join(o.StateDir, RequestFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				log.Warn("could not forget the refused enrollment request", "err", err)
			}
		}
		return Identity{}, ref
	}
	if resp.Device != o.Device {
		return Identity{}, fmt.Errorf("enroll %s: the hub answered for device %q", o.Device, resp.Device)
	}
	id := Identity{Device: o.Device, Token: resp.Token}
	if err := pinAnswerKey(o, resp, log); err != nil {
		return Identity{}, err
	}
	if resp.Certificate != "" {
		// Without it the device still has its token: a hub that requires
		// client certificates refuses it until the operator gives it one
		// (POST /v1/devices/{name}/certificate).
		if err := SaveClientCert(o.StateDir, []byte(resp.Certificate)); err != nil {
			log.Warn("the hub's client certificate was not saved", "err", err)
		} else {
			log.Info("saved the client certificate the hub signed", "file", filepath.Join(o.StateDir, ClientCertFile))
		}
	}
	if err := save(o.StateDir, id); err != nil {
		return Identity{}, err
	}
	log.Info("enrolled; device token saved", "token_file", filepath.Join(o.StateDir, TokenFile))
	return id, nil
}

// pinAnswerKey pins the hub's signing key of an enrollment answer when
// the answer can be trusted to be the hub's: it came over TLS verified
// against the hub's CA (a pinned hash, a CA file or the saved CA), or it
// is the key already pinned (from the join string). A key other than the
// pinned one is an error: another hub, or someone in the middle.
func pinAnswerKey(o Options, resp schema.EnrollResponse, log *slog.Logger) error {
	if resp.SigningKey == "" {
		return nil
	}
	key, err := schema.ParseSigningKey(resp.SigningKey)
	if err != nil {
		return fmt.Errorf("enroll %s: the hub's signing key: %w", o.Device, err)
	}
	u, _ := schema.ParseBrokerURL(o.Broker) // checked by o.check
	switch {
	case o.SigningKey != nil && !o.SigningKey.Equal(key):
		return fmt.Errorf("enroll %s: the enrollment answer names signing key %s, but the agent pinned %s (--join or --hub-signing-key): another hub, or someone in the middle; nothing is saved",
			o.Device, schema.SigningKeyID(key), schema.SigningKeyID(o.SigningKey))
	case o.SigningKey == nil && !schema.IsTLSBroker(u) && !o.InsecureTrustFirstKey:
		log.Warn("the hub's signing key came over a plain connection, which any broker on the way could have written: not pinned; start the agent with --join or --hub-signing-key", "key", schema.SigningKeyID(key))
		return nil
	}
	if err := trust.Save(o.StateDir, key); err != nil {
		return fmt.Errorf("enroll %s: %w", o.Device, err)
	}
	log.Info("pinned the hub's signing key", "key", schema.SigningKeyID(key))
	return nil
}

// Run calls Enroll until it succeeds, a refusal that is not Temporary
// ends it, or ctx is done; in between it waits per o.Backoff.
func Run(ctx context.Context, o Options) (Identity, error) {
	if err := o.check(); err != nil {
		return Identity{}, err
	}
	b := backoff.New(o.Backoff, o.Seed)
	brokers := o.Brokers
	for i := 0; ; i = (i + 1) % len(brokers) {
		o.Broker, o.Brokers = brokers[i], nil
		id, err := Enroll(ctx, o)
		if err == nil {
			return id, nil
		}
		var ref *RefusedError
		if errors.As(err, &ref) && !ref.Temporary() {
			return Identity{}, err
		}
		if ctx.Err() != nil {
			return Identity{}, ctx.Err()
		}
		d := b.Next()
		o.Logger.Warn("enrollment failed; retrying", "device", o.Device, "broker", o.Broker, "err", err, "next_broker", brokers[(i+1)%len(brokers)], "retry_in", d.Round(time.Millisecond))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return Identity{}, ctx.Err()
		case <-t.C:
		}
	}
}

// Ensure returns the identity saved by an earlier enrollment, without
// touching the network or the bootstrap token; only when there is none
// does it enroll (Run). enrolled reports which. o.Device, if set, must be
// the saved device's name.
func Ensure(ctx context.Context, o Options) (id Identity, enrolled bool, err error) {
	id, err = Stored(o.StateDir)
	if err == nil {
		if o.Device != "" && o.Device != id.Device {
			return Identity{}, false, fmt.Errorf("the state directory %s holds the token of device %q, not %q: remove %s and %s to enroll again",
				o.StateDir, id.Device, o.Device, filepath.Join(o.StateDir, TokenFile), filepath.Join(o.StateDir, DeviceFile))
		}
		return id, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return Identity{}, false, err
	}
	id, err = Run(ctx, o)
	return id, err == nil, err
}

// exchange connects as the bootstrap client, subscribes to the answer,
// sends the request and waits for the answer.
func exchange(ctx context.Context, o Options, req request) (schema.EnrollResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	answers := make(chan []byte, 1)
	lost := make(chan error, 1)
	responseTopic := o.Topics.Enroll(req.ID, schema.TopicEnrollResponse)
	tokenID, _ := schema.ParseBootstrapToken(o.BootstrapToken)
	opts := mqttio.ClientOptions(o.Broker, req.ID, schema.BootstrapUsername(tokenID), o.BootstrapToken, o.Timeout, dialer(ctx, o)).
		SetKeepAlive(30 * time.Second).
		SetConnectionLostHandler(func(_ mqtt.Client, err error) {
			select {
			case lost <- err:
			default:
			}
		}).
		SetDefaultPublishHandler(func(mqtt.Client, mqtt.Message) {})
	c := mqtt.NewClient(opts)
	tok := c.Connect()
	if err := mqttio.WaitToken(ctx, tok); err != nil {
		if mqttio.IsNotAuthorized(err) {
			return schema.EnrollResponse{}, fmt.Errorf("connect to %s: %w", o.Broker, ErrBrokerRefused)
		}
		return schema.EnrollResponse{}, fmt.Errorf("connect to %s: %w", o.Broker, err)
	}
	defer c.Disconnect(250)
	sub := c.Subscribe(responseTopic, 1, func(_ mqtt.Client, m mqtt.Message) {
		if m.Topic() != responseTopic {
			return
		}
		select {
		case answers <- append([]byte(nil), m.Payload()...):
		default:
		}
	})
	if err := mqttio.WaitToken(ctx, sub); err != nil {
		return schema.EnrollResponse{}, fmt.Errorf("subscribe to the answer: %w", err)
	}
	if st, ok := sub.(*mqtt.SubscribeToken); ok {
		if code := st.Result()[responseTopic]; code >= 0x80 {
			return schema.EnrollResponse{}, fmt.Errorf("subscribe to the answer: %w (SUBACK %#x)", ErrBrokerRefused, code)
		}
	}
	payload, err := json.Marshal(schema.EnrollRequest{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindEnrollRequest},
		Token:    o.BootstrapToken, Secret: req.Secret, Device: req.Device,
		PublicKey: o.PublicKey, CSR: req.csr,
	})
	if err != nil {
		return schema.EnrollResponse{}, err
	}
	if err := mqttio.WaitToken(ctx, c.Publish(o.Topics.Enroll(req.ID, schema.TopicEnrollRequest), 1, false, payload)); err != nil {
		return schema.EnrollResponse{}, fmt.Errorf("send the request: %w", err)
	}
	select {
	case b := <-answers:
		var resp schema.EnrollResponse
		if err := json.Unmarshal(b, &resp); err != nil {
			return schema.EnrollResponse{}, fmt.Errorf("the hub's answer does not decode: %w", err)
		}
		return resp, nil
	case err := <-lost:
		select {
		case b := <-answers: // the answer came just before the end
			var resp schema.EnrollResponse
			if json.Unmarshal(b, &resp) == nil {
				return resp, nil
			}
		default:
		}
		return schema.EnrollResponse{}, fmt.Errorf("connection lost before the hub answered: %w", err)
	case <-ctx.Done():
		return schema.EnrollResponse{}, fmt.Errorf("no answer from the hub: %w", ctx.Err())
	}
}

// dialer opens the network connection for paho and closes it when ctx
// ends, so an attempt never outlives its timeout.
func dialer(ctx context.Context, o Options) func() (net.Conn, error) {
	return func() (net.Conn, error) {
		u, err := schema.ParseBrokerURL(o.Broker)
		if err != nil {
			return nil, err
		}
		conn, err := mqttio.Dial(ctx, u, ForBroker(o.TLSConfig, u), o.Timeout)
		if err != nil {
			return nil, err
		}
		context.AfterFunc(ctx, func() { _ = conn.Close() })
		return conn, nil
	}
}
