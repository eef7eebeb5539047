package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

// slowHub is an in-memory transport that answers every request after
// delay, or fails with the request's context error when that ends first.
type slowHub struct {
	delay time.Duration
}

func (s slowHub) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		req.Body.Close()
	}
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-req.Context().Done():
		return nil, req.Context().Err()
	case <-t.C:
	}
	body := `{"apiVersion":"fleet/v1","kind":"Device","metadata":{"name":"pi-1","resourceVersion":"7"}}`
	if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/v1/devices") {
		body = `{"apiVersion":"fleet/v1","kind":"DeviceList","metadata":{"resourceVersion":"7"},"items":[]}`
	}
	return &http.Response{
		StatusCode: http.StatusOK,
		Header:     http.Header{"Content-Type": {"application/json"}},
		Body:       io.NopCloser(strings.NewReader(body)),
		Request:    req,
	}, nil
}

var errStop = errors.New("stop following")

// TestWithTimeout: the client's timeout bounds each call as a whole (all
// of ModifyDevice, not each of its requests), and never a stream.
func TestWithTimeout(t *testing.T) {
	setLabel := func(d *schema.Device) (bool, error) {
		d.Metadata.Labels = map[string]string{"site": "lab"}
		return true, nil
	}
	tests := []struct {
		name    string
		timeout time.Duration
		delay   time.Duration // of every request
		call    func(context.Context, *client.Client) error
		want    error // nil, context.DeadlineExceeded or errStop
	}{
		{"get within the timeout", 2 * time.Second, time.Second, getDevice, nil},
		{"get past the timeout", 2 * time.Second, 3 * time.Second, getDevice, context.DeadlineExceeded},
		{"no timeout", 0, time.Hour, getDevice, nil},
		{"apply past the timeout", 2 * time.Second, 3 * time.Second, func(ctx context.Context, c *client.Client) error {
			_, err := c.Apply(ctx, []byte(webManifest), false)
			return err
		}, context.DeadlineExceeded},
		{"healthz past the timeout", 2 * time.Second, 3 * time.Second, func(ctx context.Context, c *client.Client) error {
			return c.Healthz(ctx)
		}, context.DeadlineExceeded},
		{"modify within the timeout", 4 * time.Second, time.Second, func(ctx context.Context, c *client.Client) error {
			_, _, err := c.ModifyDevice(ctx, "pi-1", setLabel)
			return err
		}, nil},
		// Each of the two requests would fit; the pair does not.
		{"modify bounded as a whole", 2 * time.Second, 1500 * time.Millisecond, func(ctx context.Context, c *client.Client) error {
			_, _, err := c.ModifyDevice(ctx, "pi-1", setLabel)
			return err
		}, context.DeadlineExceeded},
		{"follow's list is not bounded", 2 * time.Second, time.Minute, func(ctx context.Context, c *client.Client) error {
			return c.Follow(ctx, client.Devices, "", client.FollowHandler{
				List: func([]schema.Object) error { return errStop },
			})
		}, errStop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, err := client.New("http://hub.test:8080", token,
					client.WithHTTPClient(&http.Client{Transport: slowHub{delay: tt.delay}}),
					client.WithTimeout(tt.timeout))
				if err != nil {
					t.Fatal(err)
				}
				err = tt.call(t.Context(), c)
				switch {
				case tt.want == nil && err != nil:
					t.Fatalf("err = %v, want none", err)
				case tt.want != nil && !errors.Is(err, tt.want):
					t.Fatalf("err = %v, want %v", err, tt.want)
				}
			})
		})
	}
}

func getDevice(ctx context.Context, c *client.Client) error {
	_, err := c.GetDevice(ctx, "pi-1")
	return err
}
