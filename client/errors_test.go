package client_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

func TestErrorBodies(t *testing.T) {
	tests := []struct {
		name   string
		code   int
		body   string
		check  func(error) bool
		substr string
	}{
		{"status", 404, `{"kind":"Status","apiVersion":"fleet/v1","code":404,"reason":"NotFound","message":"Deployment \"x\" not found"}`, client.IsNotFound, `Deployment "x" not found`},
		{"details not in message", 400, `{"kind":"Status","code":400,"reason":"Invalid","message":"Deployment \"x\" is invalid","details":[{"field":"spec.a","message":"required"},{"field":"spec.b","message":"bad"}]}`, client.IsInvalid, "Deployment \"x\" is invalid:\n  * spec.a: required\n  * spec.b: bad"},
		{"plain text", 502, "<html>bad gateway</html>", func(err error) bool { return !client.IsNotFound(err) }, "<html>bad gateway</html>"},
		{"empty", 409, "", client.IsConflict, "Conflict"},
		{"expired", 410, "", client.IsExpired, "Gone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.code)
				io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			c, _ := client.New(srv.URL, token)
			_, err := c.GetDeployment(ctxT(t), "x")
			var ae *client.APIError
			if !errors.As(err, &ae) || ae.Status.Code != tt.code {
				t.Fatalf("got %#v", err)
			}
			if !tt.check(err) {
				t.Errorf("classification of %v", err)
			}
			if !strings.Contains(err.Error(), tt.substr) {
				t.Errorf("error %q does not contain %q", err, tt.substr)
			}
		})
	}
}

func TestAPIErrorMessageListsEveryDetailOnce(t *testing.T) {
	// As the hub words it: the message lists the fields on one line, the
	// details name the object in their message.
	e := &client.APIError{Status: schema.Status{Code: 400, Reason: "Invalid",
		Message: "Deployment \"Web\" is invalid: metadata.name: bad name; spec.a: required\nDeployment \"b\" is invalid: spec.b: bad",
		Details: []schema.FieldError{
			{Field: "metadata.name", Message: `Deployment "Web": bad name`},
			{Field: "spec.a", Message: `Deployment "Web": required`},
			{Field: "spec.b", Message: `Deployment "b": bad`},
		}}}
	want := `Deployment "Web" is invalid:
  * metadata.name: bad name
  * spec.a: required
Deployment "b" is invalid: spec.b: bad`
	if got := e.Error(); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	e.Status.Details = append(e.Status.Details, schema.FieldError{Field: "spec.c", Message: "extra"})
	if got := e.Error(); got != want+":\n  * spec.c: extra" {
		t.Fatalf("a detail the message lacks: got\n%s", got)
	}
}
