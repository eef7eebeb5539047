package client

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func TestBootstrapTokens(t *testing.T) {
	var seen []string
	answerToken := `{"id":"k3x9pq","token":"k3x9pq.` + strings.Repeat("a", 32) + `","uses":5,"used":0,"created":"2026-01-01T00:00:00Z","status":"Active"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen = append(seen, r.Method+" "+r.URL.Path+" "+string(body))
		w.Header().Set("Content-Type", "application/json")
		switch r.Method + " " + r.URL.Path {
		case "POST /v1/bootstrap-tokens":
			w.WriteHeader(http.StatusCreated)
			if strings.Contains(string(body), `"uses":7`) {
				_, _ = io.WriteString(w, `{"id":"k3x9pq","uses":7}`) // no token: refused
				return
			}
			_, _ = io.WriteString(w, answerToken)
		case "GET /v1/bootstrap-tokens":
			_, _ = io.WriteString(w, `{"items":null}`)
		case "DELETE /v1/bootstrap-tokens/k3x9pq":
			_, _ = io.WriteString(w, `{"id":"k3x9pq","used":3}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(schema.Status{Code: 404, Reason: "NotFound", Message: "no"})
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL, "admin")
	if err != nil {
		t.Fatal(err)
	}
	bt, err := c.CreateBootstrapToken(t.Context(), schema.BootstrapTokenRequest{Labels: map[string]string{"site": "n"}, TTL: "1h", Uses: 5})
	if err != nil || bt.ID != "k3x9pq" || bt.Uses != 5 || bt.Token == "" {
		t.Fatalf("create = %+v, %v", bt, err)
	}
	if !strings.Contains(seen[0], `"labels":{"site":"n"}`) || !strings.Contains(seen[0], `"ttl":"1h"`) {
		t.Errorf("request body %s", seen[0])
	}
	if _, err := c.CreateBootstrapToken(t.Context(), schema.BootstrapTokenRequest{Uses: 7}); err == nil {
		t.Error("an answer without a token was accepted")
	}
	list, err := c.ListBootstrapTokens(t.Context())
	if err != nil || list.Items == nil || len(list.Items) != 0 {
		t.Errorf("list = %+v, %v", list, err)
	}
	del, err := c.DeleteBootstrapToken(t.Context(), "k3x9pq")
	if err != nil || del.Used != 3 {
		t.Errorf("delete = %+v, %v", del, err)
	}
	if _, err := c.DeleteBootstrapToken(t.Context(), "zzzzzz"); !IsNotFound(err) {
		t.Errorf("delete of a missing token: %v", err)
	}
	if _, err := c.DeleteBootstrapToken(t.Context(), "../x"); err == nil {
		t.Error("a bad ID was sent")
	}
}
