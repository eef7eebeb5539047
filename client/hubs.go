package client

import (
	"context"
	"net/http"

	"github.com/fleetmq/fleet/schema"
)

// Hubs lists the hubs of the fleet, the leader first, with their leases
// (GET /v1/hubs).
func (c *Client) Hubs(ctx context.Context) (*schema.HubMemberList, error) {
	var out schema.HubMemberList
	if err := c.do(ctx, http.MethodGet, "/v1/hubs", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
