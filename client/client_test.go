package client_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/fakehubtest"
	"github.com/fleetmq/fleet/schema"
)

const token = "s3cret-admin-token"

const webManifest = `apiVersion: fleet/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  selector:
    matchLabels: {site: lab}
  template:
    spec:
      containers:
      - name: web
        image: nginx:1.25
---
apiVersion: fleet/v1
kind: Device
metadata:
  name: pi-1
  labels: {site: lab}
`

func newHub(t *testing.T) (*fakehubtest.Hub, *client.Client) {
	t.Helper()
	h := fakehubtest.New(token)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	return h, c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestApplyIsIdempotent(t *testing.T) {
	_, c := newHub(t)
	ctx := ctxT(t)
	resp, err := c.Apply(ctx, []byte(webManifest), false)
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(resp); got != "Deployment/web created,Device/pi-1 created" {
		t.Fatalf("first apply: %s", got)
	}
	resp, err = c.Apply(ctx, []byte(webManifest), false)
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(resp); got != "Deployment/web unchanged,Device/pi-1 unchanged" {
		t.Fatalf("second apply: %s", got)
	}
	d, err := c.GetDeployment(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if d.Metadata.Generation != 1 || d.Spec.Template.Spec.Containers[0].Image != "nginx:1.25" {
		t.Fatalf("stored deployment: generation %d, image %s", d.Metadata.Generation, d.Spec.Template.Spec.Containers[0].Image)
	}
	// A server dry run reports a change but stores nothing.
	resp, err = c.Apply(ctx, []byte(strings.Replace(webManifest, "nginx:1.25", "nginx:1.26", 1)), true)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.DryRun || actions(resp) != "Deployment/web configured,Device/pi-1 unchanged" {
		t.Fatalf("dry run: %+v", resp)
	}
	if d, _ := c.GetDeployment(ctx, "web"); d.Spec.Template.Spec.Containers[0].Image != "nginx:1.25" {
		t.Fatalf("dry run stored the change")
	}
}

func actions(r *schema.ApplyResponse) string {
	var s []string
	for _, res := range r.Results {
		s = append(s, res.Kind+"/"+res.Name+" "+res.Action)
	}
	return strings.Join(s, ",")
}

func TestApplyInvalidIsAPIErrorWithDetails(t *testing.T) {
	_, c := newHub(t)
	bad := strings.Replace(webManifest, "image: nginx:1.25", "image: \"\"", 1)
	_, err := c.Apply(ctxT(t), []byte(bad), false)
	if !client.IsInvalid(err) || !errors.Is(err, schema.ErrInvalid) {
		t.Fatalf("got %v, want Invalid", err)
	}
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status.Code != 400 || len(ae.Status.Details) == 0 {
		t.Fatalf("status: %+v", ae)
	}
	if !strings.Contains(err.Error(), "spec.template.spec.containers[0].image: required") {
		t.Fatalf("error does not name the field: %v", err)
	}
	if client.IsNotFound(err) || client.IsConflict(err) || client.IsUnauthorized(err) {
		t.Fatalf("wrong classification of %v", err)
	}
}

func TestCRUD(t *testing.T) {
	h, c := newHub(t)
	ctx := ctxT(t)
	dev := &schema.Device{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDevice}, Metadata: schema.ObjectMeta{Name: "pi-1", Labels: map[string]string{"site": "lab"}}}
	got, err := c.CreateDevice(ctx, dev)
	if err != nil {
		t.Fatal(err)
	}
	if got.Metadata.Labels[schema.LabelDevice] != "pi-1" || got.Metadata.ResourceVersion == "" {
		t.Fatalf("created: %+v", got.Metadata)
	}
	if _, err := c.CreateDevice(ctx, dev); !client.IsAlreadyExists(err) {
		t.Fatalf("second create: %v, want AlreadyExists", err)
	}
	stale := got.Metadata.ResourceVersion
	got.Metadata.Labels["room"] = "kitchen"
	upd, err := c.UpdateDevice(ctx, got)
	if err != nil {
		t.Fatal(err)
	}
	if upd.Metadata.Labels["room"] != "kitchen" {
		t.Fatalf("update lost the label: %v", upd.Metadata.Labels)
	}
	got.Metadata.ResourceVersion = stale
	if _, err := c.UpdateDevice(ctx, got); !client.IsConflict(err) {
		t.Fatalf("stale update: %v, want Conflict", err)
	}
	l, err := c.ListDevices(ctx, "room=kitchen")
	if err != nil || len(l.Items) != 1 || l.Metadata.ResourceVersion == "" {
		t.Fatalf("list: %+v, %v", l, err)
	}
	if l, _ := c.ListDevices(ctx, "room=hall"); len(l.Items) != 0 {
		t.Fatalf("selector room=hall matched %d", len(l.Items))
	}
	creds, err := c.IssueToken(ctx, "pi-1")
	if err != nil || creds.Name != "pi-1" || creds.Token != h.DeviceToken("pi-1") {
		t.Fatalf("token: %+v, %v", creds, err)
	}
	if _, err := c.DeleteDevice(ctx, "pi-1", client.DeleteOptions{ResourceVersion: stale}); !client.IsConflict(err) {
		t.Fatalf("delete with stale version: %v", err)
	}
	if _, err := c.Delete(ctx, client.Devices, "pi-1", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	obj, err := c.Get(ctx, client.Devices, "pi-1")
	if !client.IsNotFound(err) {
		t.Fatalf("get after delete: %v", err)
	}
	if obj != nil {
		t.Fatalf("Get returned a non-nil interface (%T) with its error", obj)
	}
	if _, err := c.Get(ctx, client.Devices, ""); err == nil {
		t.Fatal("Get with an empty name succeeded")
	}
}

func TestBearerTokenAndUnauthorized(t *testing.T) {
	h, _ := newHub(t)
	srv := httptest.NewServer(h)
	defer srv.Close()
	c, err := client.New(srv.URL, "tok-XYZZY")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ListDevices(ctxT(t), "")
	if !client.IsUnauthorized(err) {
		t.Fatalf("got %v, want Unauthorized", err)
	}
	if strings.Contains(err.Error(), "XYZZY") {
		t.Fatalf("error shows the token: %v", err)
	}
	if err := c.Healthz(ctxT(t)); err != nil {
		t.Fatalf("healthz needs no token: %v", err)
	}
}

func TestNewParsesHubAddress(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8080":   "http://127.0.0.1:8080",
		"127.0.0.1:8080":          "http://127.0.0.1:8080",
		"https://hub.example/x/":  "https://hub.example/x",
		" http://localhost:8080 ": "http://localhost:8080",
	} {
		c, err := client.New(in, "")
		if err != nil || c.BaseURL() != want {
			t.Errorf("New(%q): %v, %v; want %s", in, c, err, want)
		}
	}
	for _, bad := range []string{"", "ftp://x", "http://", "http://h/?q=1"} {
		if _, err := client.New(bad, ""); err == nil {
			t.Errorf("New(%q) succeeded", bad)
		}
	}
}
