package enrollment

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/hub/pki"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// enrollTimeout bounds the handling of one enrollment request.
const enrollTimeout = 10 * time.Second

// PubSub is the part of broker.Conn the Handler uses.
type PubSub interface {
	Publish(ctx context.Context, topic string, payload []byte, retained bool) error
	Subscribe(ctx context.Context, filter string, handler func(topic string, payload []byte)) error
}

var _ PubSub = broker.Conn(nil)

// SigningKey is the part of pki.Signer the Handler uses.
type SigningKey interface {
	PublicKey() ed25519.PublicKey
}

var _ SigningKey = (*pki.Signer)(nil)

// Options configure a Handler. Store, Conn and Logger are required.
type Options struct {
	Store  *store.Store
	Conn   PubSub
	Topics schema.Topics
	Logger *slog.Logger
	// Reserved, if set, reports the device names no device may take
	// (the hub's own MQTT account); default: none.
	Reserved func(name string) bool
	// Signer, if set, gives the hub's signing key to every enrolled
	// device; default: none. The agent pins it when the answer came over
	// TLS verified by the hub's CA, and otherwise requires it to be the
	// key its join string pinned (edgeagent/enroll).
	Signer SigningKey
	// Certs, if set, signs the client certificate of every enrolled
	// device that sends a CSR; default: none (a CSR is ignored).
	Certs *pki.ClientCA
	// Audit, if set, records each enrollment and each refusal of a
	// request that names a bootstrap token (request ID, entry); default:
	// none.
	Audit func(requestID string, e schema.AuditEntry)
}

// New returns the Handler of opts; call Subscribe to start it.
func New(opts Options) *Handler {
	return &Handler{
		st: opts.Store, conn: opts.Conn, topics: opts.Topics, log: opts.Logger,
		reserved: opts.Reserved, signer: opts.Signer, certs: opts.Certs, audit: opts.Audit,
	}
}

// Handler answers the enrollment requests of bootstrap clients (see
// schema/enroll.go). Transport: MQTT, the one connection every device
// already has (devices behind NAT may not reach the HTTP API). The broker
// lets a bootstrap client publish only on its own request topic and read
// only its own response topic; the request repeats the bootstrap token, so
// the check here does not depend on which broker carried it. The store
// creates the device, issues its token and spends a use in one
// transaction; the answer goes out at QoS 1, never retained.
type Handler struct {
	st       *store.Store
	conn     PubSub
	topics   schema.Topics
	log      *slog.Logger
	reserved func(name string) bool
	// signer, if set, gives the hub's signing key to every enrolled
	// device (Options.Signer).
	signer SigningKey
	// certs, if set, signs the client certificate of every enrolled
	// device that sends a CSR.
	certs *pki.ClientCA
	// audit, if set, records each enrollment and each refusal of a
	// request that names a bootstrap token (request ID, entry).
	audit func(requestID string, e schema.AuditEntry)
	// ctx is set by Subscribe, before any request is handled.
	ctx context.Context
}

// Subscribe subscribes to every enrollment request until ctx is done.
func (e *Handler) Subscribe(ctx context.Context) error {
	e.ctx = ctx
	if err := e.conn.Subscribe(ctx, e.topics.EnrollRequestFilter(), e.handle); err != nil {
		return fmt.Errorf("subscribe to enrollment requests: %w", err)
	}
	return nil
}

func (e *Handler) handle(topic string, payload []byte) {
	requestID, kind, err := e.topics.ParseEnroll(topic)
	if err != nil || kind != schema.TopicEnrollRequest {
		e.log.Debug("ignoring message on an enrollment topic", "topic", topic, "err", err)
		return
	}
	if len(payload) == 0 {
		return // a cleared retained message, not a request
	}
	ctx, cancel := context.WithTimeout(e.ctx, enrollTimeout)
	defer cancel()
	resp := e.answer(ctx, requestID, payload)
	resp.TypeMeta = schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindEnrollResponse}
	b, err := json.Marshal(resp)
	if err != nil {
		e.log.Error("encode enrollment answer", "request", requestID, "err", err)
		return
	}
	if err := e.conn.Publish(ctx, e.topics.Enroll(requestID, schema.TopicEnrollResponse), b, false); err != nil {
		// The client retries the same request; within the store's retry
		// window it gets a new token for its device then.
		e.log.Warn("publish enrollment answer failed", "request", requestID, "device", resp.Device, "err", err)
	}
}

// answer enrolls the device a request asks for, or says why not. It never
// logs a token.
func (e *Handler) answer(ctx context.Context, requestID string, payload []byte) schema.EnrollResponse {
	log := e.log.With("request", requestID)
	actor := ""
	record := func(device, result, detail string) {
		if e.audit == nil || actor == "" {
			return
		}
		obj := ""
		if device != "" {
			obj = "devices/" + device
		}
		e.audit(requestID, schema.AuditEntry{Actor: actor, Action: "enroll", Object: obj, Result: result, Detail: detail})
	}
	refuse := func(reason, msg string, device string) schema.EnrollResponse {
		log.Info("enrollment refused", "device", device, "reason", reason, "why", msg)
		record(device, reason, msg)
		return schema.EnrollResponse{Device: device, Reason: reason, Message: msg}
	}
	if len(payload) > schema.MaxEnrollPayload {
		return refuse(schema.EnrollInvalid, fmt.Sprintf("request of %d bytes: at most %d", len(payload), schema.MaxEnrollPayload), "")
	}
	var req schema.EnrollRequest
	// Unknown fields are allowed: a newer agent may send more.
	if err := json.NewDecoder(bytes.NewReader(payload)).Decode(&req); err != nil {
		return refuse(schema.EnrollInvalid, "request does not decode: "+err.Error(), "")
	}
	if req.Kind != "" && req.Kind != schema.KindEnrollRequest {
		return refuse(schema.EnrollInvalid, fmt.Sprintf("kind %q: want %s", req.Kind, schema.KindEnrollRequest), req.Device)
	}
	if id, err := schema.ParseBootstrapToken(req.Token); err == nil {
		log = log.With("bootstrap_token", id) // the public half only
		actor = "bootstrap-token " + id
	}
	if e.reserved != nil && e.reserved(req.Device) {
		return refuse(schema.EnrollNameTaken, fmt.Sprintf("device name %q is reserved for the hub's own MQTT account: pick another (--device or --name-from)", req.Device), req.Device)
	}
	// A CSR is checked before the enrollment spends a use of the token.
	var csr *x509.CertificateRequest
	if req.CSR != "" && e.certs != nil {
		c, err := pki.ParseCSR(req.CSR, req.Device)
		if err != nil {
			return refuse(schema.EnrollInvalid, err.Error(), req.Device)
		}
		csr = c
	}
	res, err := e.st.Enroll(ctx, store.Enrollment{Token: req.Token, RequestID: requestID, Secret: req.Secret, Device: req.Device, PublicKey: req.PublicKey})
	switch {
	case err == nil:
		log.Info("device enrolled", "device", req.Device, "labels", res.Device.Metadata.Labels, "retry", res.Retry)
		detail := "labels " + formatLabels(res.Device.Metadata.Labels)
		if res.Retry {
			detail += "; a retried request: new token"
		}
		record(req.Device, schema.AuditOK, detail)
		resp := schema.EnrollResponse{Device: req.Device, Token: res.Token}
		if e.signer != nil {
			pub := e.signer.PublicKey()
			resp.SigningKey, resp.SigningKeyID = schema.EncodeSigningKey(pub), schema.SigningKeyID(pub)
		}
		if csr != nil {
			// The device exists now, with its token; a certificate that
			// fails to sign leaves it without one (it can get one over
			// the API), not without its enrollment.
			if certPEM, notAfter, err := e.certs.Sign(csr, req.Device); err != nil {
				log.Error("enrolled, but its client certificate was not signed", "device", req.Device, "err", err)
			} else {
				resp.Certificate, resp.CA = string(certPEM), string(e.certs.PEM())
				log.Info("signed the device's client certificate", "device", req.Device, "expires", notAfter.Format(time.DateOnly))
			}
		}
		return resp
	case errors.Is(err, store.ErrBootstrapUnauthorized):
		return refuse(schema.EnrollUnauthorized, "the bootstrap token is unknown or was deleted", req.Device)
	case errors.Is(err, store.ErrBootstrapExpired):
		return refuse(schema.EnrollExpired, err.Error()+": create a new one with `fleet token create`", req.Device)
	case errors.Is(err, store.ErrBootstrapUsedUp):
		return refuse(schema.EnrollUsedUp, err.Error()+": create a new one with `fleet token create`", req.Device)
	case errors.Is(err, store.ErrAlreadyExists):
		return refuse(schema.EnrollNameTaken, err.Error()+"; pick another name (--device or --name-from), or add the device with `fleet device add`", req.Device)
	case errors.Is(err, store.ErrRequestReused):
		return refuse(schema.EnrollRequestReused, err.Error()+"; start a new request", req.Device)
	case errors.Is(err, schema.ErrInvalid):
		return refuse(schema.EnrollInvalid, err.Error(), req.Device)
	default:
		log.Error("enrollment failed", "device", req.Device, "err", err)
		return schema.EnrollResponse{Device: req.Device, Reason: schema.EnrollInternalError, Message: "the hub could not enroll the device; try again"}
	}
}

// formatLabels is k=v,k2=v2 in key order ("none" for none).
func formatLabels(l map[string]string) string {
	if len(l) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(l))
	for _, k := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ",")
}
