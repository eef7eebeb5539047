package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/fleetmq/fleet/schema"
)

// CreateBootstrapToken creates a bootstrap token: devices that enroll with
// it get its labels. The answer carries the token, which the hub does not
// keep: it cannot be read again.
func (c *Client) CreateBootstrapToken(ctx context.Context, req schema.BootstrapTokenRequest) (*schema.BootstrapToken, error) {
	var out schema.BootstrapToken
	if err := c.do(ctx, http.MethodPost, "/v1/bootstrap-tokens", nil, req, &out); err != nil {
		return nil, err
	}
	if out.Token == "" {
		return nil, errors.New("POST /v1/bootstrap-tokens: the hub answered without a token")
	}
	return &out, nil
}

// ListBootstrapTokens lists the bootstrap tokens (never the tokens
// themselves).
func (c *Client) ListBootstrapTokens(ctx context.Context) (*schema.BootstrapTokenList, error) {
	var out schema.BootstrapTokenList
	if err := c.do(ctx, http.MethodGet, "/v1/bootstrap-tokens", nil, nil, &out); err != nil {
		return nil, err
	}
	if out.Items == nil {
		out.Items = []schema.BootstrapToken{}
	}
	return &out, nil
}

// DeleteBootstrapToken deletes the bootstrap token id (the part before
// the '.'). Devices that enrolled with it keep their own tokens.
func (c *Client) DeleteBootstrapToken(ctx context.Context, id string) (*schema.BootstrapToken, error) {
	if err := schema.ValidateBootstrapTokenID(id); err != nil {
		return nil, err
	}
	var out schema.BootstrapToken
	if err := c.do(ctx, http.MethodDelete, "/v1/bootstrap-tokens/"+url.PathEscape(id), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
