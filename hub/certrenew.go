package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fleetmq/fleet/hub/enrollment"
	"github.com/fleetmq/fleet/hub/pki"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// certRenewInterval is how often one device may have its client
// certificate renewed over MQTT.
const certRenewInterval = time.Minute

// certRenewer renews devices' client certificates over their MQTT
// session: a device publishes a DeviceCertificateRequest on its own csr
// topic (schema.TopicCSR), the hub signs it, as at enrollment, and
// answers a DeviceCertificate on the device's certificate topic
// (schema.TopicCertificate), which only that device reads. The broker
// lets only the device publish on its csr topic, after its token was
// checked: the token is what the hub trusts, as for POST
// /v1/devices/{name}/certificate. So a device whose certificate expired
// (its agent then presents none, and a broker with
// --mqtt-client-certs=optional admits it on its token) renews as well as
// one inside the renewal window.
type certRenewer struct {
	ca     *pki.ClientCA
	st     *store.Store
	conn   enrollment.PubSub
	topics schema.Topics
	log    *slog.Logger
	ctx    context.Context

	mu   sync.Mutex
	last map[string]time.Time // device -> last renewal
}

func newCertRenewer(ca *pki.ClientCA, st *store.Store, conn enrollment.PubSub, topics schema.Topics, log *slog.Logger) *certRenewer {
	return &certRenewer{ca: ca, st: st, conn: conn, topics: topics, log: log, last: map[string]time.Time{}}
}

// Subscribe subscribes to every device's csr topic until ctx is done.
func (r *certRenewer) Subscribe(ctx context.Context) error {
	r.ctx = ctx
	if err := r.conn.Subscribe(ctx, r.topics.DeviceFilter(schema.TopicCSR), r.handle); err != nil {
		return fmt.Errorf("subscribe to client certificate requests: %w", err)
	}
	return nil
}

func (r *certRenewer) handle(topic string, payload []byte) {
	device, kind, err := r.topics.ParseDevice(topic)
	if err != nil || kind != schema.TopicCSR || len(payload) == 0 {
		return
	}
	log := r.log.With("device", device)
	if !r.allow(device, time.Now()) {
		log.Warn("client certificate request ignored: one was signed less than a minute ago")
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	answer, err := r.sign(ctx, device, payload)
	if err != nil {
		log.Warn("client certificate request refused", "err", err)
		return
	}
	r.signed(device, time.Now())
	b, err := json.Marshal(answer)
	if err == nil {
		err = r.conn.Publish(ctx, r.topics.Device(device, schema.TopicCertificate), b, false)
	}
	if err != nil {
		log.Warn("client certificate renewal not sent; the device asks again", "err", err)
		return
	}
	log.Info("renewed a device's client certificate over MQTT", "expires", answer.NotAfter.Format(time.RFC3339))
}

// allow reports whether device may have a certificate signed now: none
// was signed for it in the last certRenewInterval (signing is what
// costs; a refused request costs a decode).
func (r *certRenewer) allow(device string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.last[device]
	return !ok || now.Sub(t) >= certRenewInterval
}

// signed records that device had a certificate signed at now.
func (r *certRenewer) signed(device string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last[device] = now
}

// sign checks that device exists and that the request is a CSR for it,
// and signs it.
func (r *certRenewer) sign(ctx context.Context, device string, payload []byte) (*schema.DeviceCertificate, error) {
	if len(payload) > maxCSRBody {
		return nil, fmt.Errorf("request over %d bytes", maxCSRBody)
	}
	if _, err := r.st.Get(ctx, schema.KindDevice, device); err != nil {
		return nil, err
	}
	var req schema.DeviceCertificateRequest
	if err := json.Unmarshal(payload, &req); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	csr, err := pki.ParseCSR(req.CSR, device)
	if err != nil {
		return nil, err
	}
	certPEM, notAfter, err := r.ca.Sign(csr, device)
	if err != nil {
		return nil, err
	}
	return &schema.DeviceCertificate{Device: device, Certificate: string(certPEM), NotAfter: notAfter, CA: string(r.ca.PEM())}, nil
}
