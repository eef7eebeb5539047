package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/fleetmq/fleet/schema"
)

func credentialPath(name string) string {
	return "/v1/credentials/" + url.PathEscape(name)
}

// CreateCredential creates an operator credential of role
// schema.RoleMonitor (status, events and metrics; MQTT subscriptions to
// every device's status), schema.RoleViewer (a read-only admin) or
// schema.RoleAdmin. The answer carries the token, which the hub does not
// keep: it cannot be read again.
func (c *Client) CreateCredential(ctx context.Context, name, role string) (*schema.Credential, error) {
	if err := checkName("credentials", name); err != nil {
		return nil, err
	}
	var out schema.Credential
	in := schema.Credential{Name: name, Role: role}
	if err := c.do(ctx, http.MethodPost, "/v1/credentials", nil, in, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListCredentials lists the credentials: names and roles, never tokens.
func (c *Client) ListCredentials(ctx context.Context) (*schema.CredentialList, error) {
	var out schema.CredentialList
	if err := c.do(ctx, http.MethodGet, "/v1/credentials", nil, nil, &out); err != nil {
		return nil, err
	}
	if out.Items == nil {
		out.Items = []schema.Credential{}
	}
	return &out, nil
}

// DeleteCredential deletes a credential; the hub disconnects its MQTT
// sessions.
func (c *Client) DeleteCredential(ctx context.Context, name string) error {
	if err := checkName("credentials", name); err != nil {
		return err
	}
	return c.do(ctx, http.MethodDelete, credentialPath(name), nil, nil, nil)
}
