package client

import (
	"context"
	"net/http"
)

// DeviceRekey is the hub's answer to Rekey (POST /v1/devices/{name}/rekey).
type DeviceRekey struct {
	// Name is the device's.
	Name string `json:"name"`
	// KeyID names the key bound until the device reports another (""
	// if none is bound yet).
	KeyID string `json:"keyId,omitempty"`
	// RekeyPending is true once the hub accepted the rekey.
	RekeyPending bool `json:"rekeyPending"`
}

// Rekey lets the device's next reported public key replace the one the
// hub has bound for it (from its enrollment or first report), once: the
// hub seals the device's Secrets to the new key from then on. Admin only.
func (c *Client) Rekey(ctx context.Context, device string) (*DeviceRekey, error) {
	var out DeviceRekey
	if err := c.do(ctx, http.MethodPost, objectPath(Devices, device)+"/rekey", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
