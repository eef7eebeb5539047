package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// Kind names a resource collection of the API, as it appears in URLs: the
// Resource of a stored kind of schema's table of kinds.
type Kind string

// The collections of the API that the client has typed methods for; every
// stored kind of schema.Kinds is a collection (see KindOf).
const (
	Deployments Kind = "deployments"
	Devices     Kind = "devices"
	ConfigMaps  Kind = "configmaps"
	// Secrets are read with their keys and the size of each value: the
	// hub never returns their values.
	Secrets Kind = "secrets"
)

// Kinds are the collections, in the order the CLI lists them
// (schema.ListedKinds).
var Kinds = listedKinds()

func listedKinds() []Kind {
	var out []Kind
	for _, k := range schema.ListedKinds() {
		out = append(out, Kind(k.Resource))
	}
	return out
}

// info is the collection's row of the table of kinds.
func (k Kind) info() (schema.KindInfo, bool) { return schema.KindOfResource(string(k)) }

// Object kind (schema.KindDeployment, schema.KindDevice…) of the
// collection.
func (k Kind) Object() string {
	info, _ := k.info()
	return info.Kind
}

// KindOf returns the collection of an object kind ("Deployment" →
// Deployments), or "" for an unknown kind.
func KindOf(objectKind string) Kind {
	if k, ok := schema.LookupKind(objectKind); ok && k.Stored() {
		return Kind(k.Resource)
	}
	return ""
}

func (k Kind) valid() error {
	if k.Object() == "" {
		return fmt.Errorf("unknown resource kind %q: want %s", string(k), quotedKinds())
	}
	return nil
}

// quotedKinds is `"deployments", "devices", "configmaps" or "secrets"`.
func quotedKinds() string {
	q := make([]string, len(Kinds))
	for i, k := range Kinds {
		q[i] = strconv.Quote(string(k))
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

// Client talks to one hub. It is safe for concurrent use.
type Client struct {
	base      *url.URL
	token     string
	http      *http.Client
	userAgent string
	timeout   time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client send its requests through hc (for TLS
// settings or a transport in tests). Request deadlines come from the
// context of each call; a watch needs an hc without a Timeout.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.http = hc }
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// WithTimeout bounds every call of the client by d: the requests a method
// makes (ModifyDevice's rereads and retries included) fail with
// context.DeadlineExceeded once d has passed since the call. Watch and
// Follow are streams that run until their context ends, and are not
// bounded; neither is the list Follow starts with. d <= 0, the default,
// leaves every deadline to the context of the call.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) { c.timeout = d }
}

// streamKey marks the context of a stream (Follow): the client's timeout
// does not apply to the requests made with it.
type streamKey struct{}

// bound limits ctx by the client's timeout (see WithTimeout).
func (c *Client) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.timeout <= 0 || ctx.Value(streamKey{}) != nil {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout)
}

// New returns a client of the hub at baseURL ("http://127.0.0.1:8080"; a URL
// without a scheme gets http://) that authenticates with the bearer token.
func New(baseURL, token string, opts ...Option) (*Client, error) {
	u, err := ParseHubURL(baseURL)
	if err != nil {
		return nil, err
	}
	c := &Client{base: u, token: token, http: http.DefaultClient, userAgent: "fleet-client"}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// ParseHubURL parses the address of a hub: a URL, or host:port to which it
// adds http://. Only http and https are accepted.
func ParseHubURL(s string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("hub address is empty")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("hub address %q: %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("hub address %q: scheme must be http or https", s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("hub address %q: no host", s)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("hub address %q: must not have a query or fragment", s)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return u, nil
}

// BaseURL returns the hub address the client talks to.
func (c *Client) BaseURL() string { return c.base.String() }

// url builds the URL of an API path ("/v1/deployments/web").
func (c *Client) url(p string, q url.Values) string {
	u := *c.base
	u.Path = c.base.Path + p
	u.RawQuery = q.Encode()
	return u.String()
}

// request sends one request and returns the response if its status is 2xx;
// any other status is decoded into an *APIError.
func (c *Client) request(ctx context.Context, method, p string, q url.Values, body []byte, contentType string) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url(p, q), rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, p, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, c.base.Redacted()+p, unwrapURLError(err))
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// unwrapURLError drops the *url.Error wrapper, whose text repeats the
// method and URL (with the query string), keeping the cause.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// maxResponseBytes bounds what the client reads from one non-watch response.
const maxResponseBytes = 64 << 20

// do sends a request and decodes a JSON answer into out (unless nil).
func (c *Client) do(ctx context.Context, method, p string, q url.Values, in any, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("%s %s: encode request: %w", method, p, err)
		}
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	resp, err := c.request(ctx, method, p, q, body, "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decodeBody(resp, method, p, out)
}

func decodeBody(resp *http.Response, method, p string, out any) error {
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("%s %s: read response: %w", method, p, err)
	}
	if len(data) > maxResponseBytes {
		return fmt.Errorf("%s %s: the response is larger than %d MiB: ask for a list in pages (limit, continue)", method, p, maxResponseBytes>>20)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode response: %w", method, p, err)
	}
	return nil
}

func objectPath(kind Kind, name string) string {
	return "/v1/" + string(kind) + "/" + url.PathEscape(name)
}

func selectorQuery(selector string) url.Values {
	q := url.Values{}
	if selector != "" {
		q.Set("labelSelector", selector)
	}
	return q
}

// Apply sends a manifest stream (YAML or JSON, multi-document) to the hub,
// which validates every document before storing any. With dryRun the hub
// validates and reports what it would do, storing nothing.
func (c *Client) Apply(ctx context.Context, manifest []byte, dryRun bool) (*schema.ApplyResponse, error) {
	q := url.Values{}
	if dryRun {
		q.Set("dryRun", "server")
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	resp, err := c.request(ctx, http.MethodPost, "/v1/apply", q, manifest, "application/yaml")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out schema.ApplyResponse
	if err := decodeBody(resp, http.MethodPost, "/v1/apply", &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListDeployments lists the deployments whose labels match selector
// ("k=v,k2=v2"; empty for all).
func (c *Client) ListDeployments(ctx context.Context, selector string) (*schema.DeploymentList, error) {
	items, rv, err := listTyped[schema.Deployment](ctx, c, "/v1/deployments", selector)
	if err != nil {
		return nil, err
	}
	out := schema.DeploymentList{Items: items}
	out.APIVersion, out.Kind, out.Metadata.ResourceVersion = schema.APIVersion, "DeploymentList", rv
	return &out, nil
}

// ListDevices lists the devices whose labels match selector.
func (c *Client) ListDevices(ctx context.Context, selector string) (*schema.DeviceList, error) {
	items, rv, err := listTyped[schema.Device](ctx, c, "/v1/devices", selector)
	if err != nil {
		return nil, err
	}
	out := schema.DeviceList{Items: items}
	out.APIVersion, out.Kind, out.Metadata.ResourceVersion = schema.APIVersion, "DeviceList", rv
	return &out, nil
}

// ListConfigMaps lists the ConfigMaps whose labels match selector.
func (c *Client) ListConfigMaps(ctx context.Context, selector string) (*schema.ConfigMapList, error) {
	items, rv, err := listTyped[schema.ConfigMap](ctx, c, "/v1/configmaps", selector)
	if err != nil {
		return nil, err
	}
	out := schema.ConfigMapList{Items: items}
	out.APIVersion, out.Kind, out.Metadata.ResourceVersion = schema.APIVersion, "ConfigMapList", rv
	return &out, nil
}

// ListSecrets lists the Secrets whose labels match selector, with their
// keys and sizes (Secret.Keys), never their values. A monitor credential
// may not list them (IsForbidden).
func (c *Client) ListSecrets(ctx context.Context, selector string) (*schema.SecretList, error) {
	items, rv, err := listTyped[schema.Secret](ctx, c, "/v1/secrets", selector)
	if err != nil {
		return nil, err
	}
	out := schema.SecretList{Items: items}
	out.APIVersion, out.Kind, out.Metadata.ResourceVersion = schema.APIVersion, "SecretList", rv
	return &out, nil
}

// GetConfigMap reads one ConfigMap.
func (c *Client) GetConfigMap(ctx context.Context, name string) (*schema.ConfigMap, error) {
	return getObject[schema.ConfigMap](ctx, c, ConfigMaps, name)
}

// GetSecret reads one Secret: its keys and sizes (Keys), never its values.
func (c *Client) GetSecret(ctx context.Context, name string) (*schema.Secret, error) {
	return getObject[schema.Secret](ctx, c, Secrets, name)
}

// DeleteConfigMap deletes a ConfigMap and returns it as it was.
func (c *Client) DeleteConfigMap(ctx context.Context, name string, opts DeleteOptions) (*schema.ConfigMap, error) {
	return deleteObject[schema.ConfigMap](ctx, c, ConfigMaps, name, opts)
}

// DeleteSecret deletes a Secret and returns it as it was (keys and sizes).
func (c *Client) DeleteSecret(ctx context.Context, name string, opts DeleteOptions) (*schema.Secret, error) {
	return deleteObject[schema.Secret](ctx, c, Secrets, name, opts)
}

// GetDeployment reads one deployment.
func (c *Client) GetDeployment(ctx context.Context, name string) (*schema.Deployment, error) {
	return getObject[schema.Deployment](ctx, c, Deployments, name)
}

// GetDevice reads one device.
func (c *Client) GetDevice(ctx context.Context, name string) (*schema.Device, error) {
	return getObject[schema.Device](ctx, c, Devices, name)
}

// DeviceEvents reads the device's recent events (pulls, starts, exits,
// backoffs, errors), oldest first. The hub keeps the last few of each
// device in memory: a restarted hub has only those heard since.
func (c *Client) DeviceEvents(ctx context.Context, name string) ([]schema.Event, error) {
	if err := checkName(Devices, name); err != nil {
		return nil, err
	}
	var l schema.EventList
	if err := c.do(ctx, http.MethodGet, objectPath(Devices, name)+"/events", nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Events reads the recent events of the devices selector selects ("" for
// every device), of type typ ("Normal", "Warning" or "" for both): the
// newest limit of them (0 for all the hub keeps), oldest first.
func (c *Client) Events(ctx context.Context, selector, typ string, limit int) ([]schema.Event, error) {
	q := selectorQuery(selector)
	if typ != "" {
		q.Set("type", typ)
	}
	q.Set("limit", strconv.Itoa(limit))
	var l schema.EventList
	if err := c.do(ctx, http.MethodGet, "/v1/events", q, nil, &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// CreateDevice registers a new device.
func (c *Client) CreateDevice(ctx context.Context, d *schema.Device) (*schema.Device, error) {
	return writeObject(ctx, c, http.MethodPost, Devices, "", d)
}

// UpdateDevice replaces a device's labels and spec. If d carries a
// resourceVersion it must be current, or the hub answers Conflict
// (IsConflict).
func (c *Client) UpdateDevice(ctx context.Context, d *schema.Device) (*schema.Device, error) {
	return writeObject(ctx, c, http.MethodPut, Devices, d.Metadata.Name, d)
}

// DeleteOptions are preconditions of a delete.
type DeleteOptions struct {
	// ResourceVersion, when set, must be the object's current one.
	ResourceVersion string
}

func (o DeleteOptions) query() url.Values {
	q := url.Values{}
	if o.ResourceVersion != "" {
		q.Set("resourceVersion", o.ResourceVersion)
	}
	return q
}

// DeleteDeployment deletes a deployment and returns it as it was.
func (c *Client) DeleteDeployment(ctx context.Context, name string, opts DeleteOptions) (*schema.Deployment, error) {
	return deleteObject[schema.Deployment](ctx, c, Deployments, name, opts)
}

// DeleteDevice deletes a device and returns it as it was; the hub clears its
// desired state.
func (c *Client) DeleteDevice(ctx context.Context, name string, opts DeleteOptions) (*schema.Device, error) {
	return deleteObject[schema.Device](ctx, c, Devices, name, opts)
}

// Get reads one object of any kind.
func (c *Client) Get(ctx context.Context, kind Kind, name string) (schema.Object, error) {
	info, ok := kind.info()
	if !ok {
		return nil, kind.valid()
	}
	if err := checkName(kind, name); err != nil {
		return nil, err
	}
	obj := info.New()
	if err := c.do(ctx, http.MethodGet, objectPath(kind, name), nil, nil, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// List lists the objects of any kind whose labels match selector, and
// returns them with the list's resourceVersion. It asks for
// DefaultChunkSize items at a time (ListChunked).
func (c *Client) List(ctx context.Context, kind Kind, selector string) ([]schema.Object, string, error) {
	return c.ListChunked(ctx, kind, selector, ListOptions{})
}

// Delete deletes one object of any kind and returns it as it was.
func (c *Client) Delete(ctx context.Context, kind Kind, name string, opts DeleteOptions) (schema.Object, error) {
	info, ok := kind.info()
	if !ok {
		return nil, kind.valid()
	}
	if err := checkName(kind, name); err != nil {
		return nil, err
	}
	obj := info.New()
	if err := c.do(ctx, http.MethodDelete, objectPath(kind, name), opts.query(), nil, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// IssueToken issues a new broker token for a device; the old one stops
// working at once. The hub keeps only a hash: the returned token cannot be
// read again.
func (c *Client) IssueToken(ctx context.Context, device string) (*schema.DeviceCredentials, error) {
	var out schema.DeviceCredentials
	if err := c.do(ctx, http.MethodPost, objectPath(Devices, device)+"/token", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Healthz checks that the hub answers GET /healthz (which needs no token).
func (c *Client) Healthz(ctx context.Context) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	resp, err := c.request(ctx, http.MethodGet, "/healthz", nil, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<10))
	return err
}

func getObject[T any](ctx context.Context, c *Client, kind Kind, name string) (*T, error) {
	if err := checkName(kind, name); err != nil {
		return nil, err
	}
	var out T
	if err := c.do(ctx, http.MethodGet, objectPath(kind, name), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func writeObject[T any](ctx context.Context, c *Client, method string, kind Kind, name string, in *T) (*T, error) {
	p := "/v1/" + string(kind)
	if method == http.MethodPut {
		if err := checkName(kind, name); err != nil {
			return nil, err
		}
		p = objectPath(kind, name)
	}
	var out T
	if err := c.do(ctx, method, p, nil, in, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func deleteObject[T any](ctx context.Context, c *Client, kind Kind, name string, opts DeleteOptions) (*T, error) {
	if err := checkName(kind, name); err != nil {
		return nil, err
	}
	var out T
	if err := c.do(ctx, http.MethodDelete, objectPath(kind, name), opts.query(), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// checkName refuses an empty name, which would address the collection.
func checkName(kind Kind, name string) error {
	if name == "" {
		return fmt.Errorf("%s: resource name is empty", kind)
	}
	return nil
}
