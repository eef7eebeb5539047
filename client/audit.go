package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/fleetmq/fleet/schema"
)

// AuditOptions select audit entries (GET /v1/audit).
type AuditOptions struct {
	// Since is a duration back from now ("1h") or an RFC 3339 time; ""
	// for every entry kept.
	Since string
	// Actor keeps only one actor's entries: a credential's name,
	// "device NAME" or "anonymous".
	Actor string
	// Limit is how many of the newest entries; 0 asks for the hub's
	// default (schema.DefaultAuditLimit), negative for all.
	Limit int
}

// Audit reads the hub's audit trail, oldest entry first. Only an admin
// may.
func (c *Client) Audit(ctx context.Context, o AuditOptions) ([]schema.AuditEntry, error) {
	q := url.Values{}
	if o.Since != "" {
		q.Set("since", o.Since)
	}
	if o.Actor != "" {
		q.Set("actor", o.Actor)
	}
	switch {
	case o.Limit > 0:
		q.Set("limit", strconv.Itoa(o.Limit))
	case o.Limit < 0:
		q.Set("limit", "0")
	}
	var l schema.AuditList
	if err := c.do(ctx, http.MethodGet, "/v1/audit", q, nil, &l); err != nil {
		return nil, err
	}
	if l.Items == nil {
		l.Items = []schema.AuditEntry{}
	}
	return l.Items, nil
}

// VerifyAudit asks the hub to check its audit trail's hash chain end to
// end (POST /v1/audit/verify; admin only, and itself audited). A broken
// chain is no error: v.OK is false and v.Broken names the first entry
// that breaks it.
func (c *Client) VerifyAudit(ctx context.Context) (schema.AuditVerification, error) {
	var v schema.AuditVerification
	err := c.do(ctx, http.MethodPost, "/v1/audit/verify", nil, nil, &v)
	return v, err
}
