package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/fleetmq/fleet/schema"
)

// CAStatus reads where a rotation of the hub's own CA stands (GET
// /v1/ca).
func (c *Client) CAStatus(ctx context.Context) (*schema.CARotationStatus, error) {
	var out schema.CARotationStatus
	if err := c.do(ctx, http.MethodGet, "/v1/ca", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RotateCA starts a rotation of the hub's own CA (POST /v1/ca/rotate,
// admin).
func (c *Client) RotateCA(ctx context.Context) (*schema.CARotationStatus, error) {
	var out schema.CARotationStatus
	if err := c.do(ctx, http.MethodPost, "/v1/ca/rotate", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RetireCA completes the rotation under way: the new CA signs and the
// old one is refused (POST /v1/ca/retire, admin). Unless force, the hub
// refuses while a device does not trust the new CA yet.
func (c *Client) RetireCA(ctx context.Context, force bool) (*schema.CARotationStatus, error) {
	var q url.Values
	if force {
		q = url.Values{"force": {"true"}}
	}
	var out schema.CARotationStatus
	if err := c.do(ctx, http.MethodPost, "/v1/ca/retire", q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RotateSigningKey rotates the running hub's desired-state signing key
// (POST /v1/signing-key/rotate, admin) and returns the hub's info with
// the new key.
func (c *Client) RotateSigningKey(ctx context.Context) (*schema.HubInfo, error) {
	var out schema.HubInfo
	if err := c.do(ctx, http.MethodPost, "/v1/signing-key/rotate", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
