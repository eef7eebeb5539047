package hub

import (
	"context"
	"net"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/schema"
)

// Audit actions of the hub's own (not HTTP) events.
const (
	// AuditActionLogin is a refused MQTT login (result LoginRefused or
	// LoginThrottled).
	AuditActionLogin = "login"
	// AuditActionEnroll is a device's enrollment with a bootstrap token.
	AuditActionEnroll = "enroll"
)

// auditLoginRefused records a refused MQTT login in the audit trail: the
// username as actor, the client's address as source, aggregated per
// username, address and result (api.Server.AuditAggregated), so a flood of
// guesses costs two entries a minute, which count every guess.
func (h *Hub) auditLoginRefused(r broker.LoginRefusal) {
	if h.api == nil {
		return
	}
	src := hostOf(r.Remote)
	h.api.AuditAggregated(schema.AuditEntry{
		Actor: r.Username, Source: src, Action: AuditActionLogin, Object: "mqtt",
		Result: r.Result, Detail: r.Reason,
	})
}

// auditEnroll records an enrollment, or its refusal (aggregated): the
// bootstrap token (its public ID) as actor, the device as object; the
// source is the bootstrap client's address when the embedded broker knows
// it.
func (h *Hub) auditEnroll(requestID string, e schema.AuditEntry) {
	if h.api == nil {
		return
	}
	if h.broker != nil {
		e.Source = hostOf(h.broker.RemoteOf(requestID))
	}
	if e.Result != schema.AuditOK {
		// A refusal (Expired, UsedUp, NameTaken…): a token holder can
		// cause these in bulk.
		h.api.AuditAggregated(e)
		return
	}
	h.api.Audit(context.Background(), e)
}

// runAudit flushes the API's aggregated audit entries and prunes the
// trail until ctx is done, then flushes what is left: Run stops it before
// the store closes.
func (h *Hub) runAudit(ctx context.Context) {
	if h.api != nil {
		h.api.RunAudit(ctx, 0)
	}
}

// hostOf is an address without its port.
func hostOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}
