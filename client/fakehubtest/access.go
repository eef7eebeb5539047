package fakehubtest

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/fleetmq/fleet/schema"
)

// DefaultMQTTURL is the MQTT URL a new fake hub reports in GET /v1/info.
const DefaultMQTTURL = "tcp://127.0.0.1:1883"

// credential is a stored non-device credential.
type credential struct {
	role, token string
}

// failure is an answer injected by Fail.
type failure struct {
	times  int // left; <0 means always
	status schema.Status
}

// SetInfo sets what GET /v1/info answers; nil makes it 404, as a hub that
// predates it would.
func (h *Hub) SetInfo(info *schema.HubInfo) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.info = clone(info)
}

// Fail makes the next times requests "METHOD /path" (times < 0: all of
// them) fail with code and reason, before anything is done, so that a
// test can break one step of a command that makes several requests.
func (h *Hub) Fail(method, path string, times, code int, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failures[method+" "+path] = &failure{times: times, status: schema.Status{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "Status"},
		Code:     code, Reason: reason, Message: fmt.Sprintf("injected failure of %s %s", method, path),
	}}
}

func (h *Hub) injectedFailure(w http.ResponseWriter, r *http.Request) bool {
	h.mu.Lock()
	f, ok := h.failures[r.Method+" "+r.URL.Path]
	if !ok || f.times == 0 {
		h.mu.Unlock()
		return false
	}
	if f.times > 0 {
		f.times--
	}
	st := f.status
	h.mu.Unlock()
	writeJSON(w, st.Code, st)
	return true
}

// AddCredential stores a credential with any role (an admin, say), as
// fleet-hub does for its own; it returns the token.
func (h *Hub) AddCredential(name, role string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.addCredential(name, role)
}

func (h *Hub) addCredential(name, role string) string {
	h.uid++
	tok := fmt.Sprintf("fake-%s-token-%d", role, h.uid)
	h.credentials[name] = credential{role: role, token: tok}
	return tok
}

// Credential returns the role and token of a credential, or "" and "".
func (h *Hub) Credential(name string) (role, token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.credentials[name]
	return c.role, c.token
}

// serveAccess serves /v1/info and /v1/credentials[/{name}]; it reports
// whether the path was one of them.
func (h *Hub) serveAccess(w http.ResponseWriter, r *http.Request) bool {
	switch p := r.URL.Path; {
	case p == "/v1/info":
		if r.Method != http.MethodGet {
			writeStatus(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "use GET", nil)
			return true
		}
		h.mu.Lock()
		info := clone(h.info)
		h.mu.Unlock()
		if info == nil {
			writeStatus(w, http.StatusNotFound, "NotFound", "no such path "+p, nil)
			return true
		}
		writeJSON(w, http.StatusOK, info)
	case p == "/v1/credentials":
		switch r.Method {
		case http.MethodGet:
			h.listCredentials(w)
		case http.MethodPost:
			h.createCredential(w, r)
		default:
			writeStatus(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "use GET or POST", nil)
		}
	case strings.HasPrefix(p, "/v1/credentials/"):
		name := strings.TrimPrefix(p, "/v1/credentials/")
		if r.Method != http.MethodDelete {
			writeStatus(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "use DELETE", nil)
			return true
		}
		h.deleteCredential(w, name)
	default:
		return false
	}
	return true
}

func (h *Hub) listCredentials(w http.ResponseWriter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := schema.CredentialList{Items: []schema.Credential{}}
	for _, n := range slices.Sorted(maps.Keys(h.credentials)) {
		l.Items = append(l.Items, schema.Credential{Name: n, Role: h.credentials[n].role})
	}
	writeJSON(w, http.StatusOK, l)
}

func (h *Hub) createCredential(w http.ResponseWriter, r *http.Request) {
	data, ok := readBody(w, r)
	if !ok {
		return
	}
	var in schema.Credential
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeStatus(w, http.StatusBadRequest, "BadRequest", "decode credential: "+err.Error(), nil)
		return
	}
	var details []schema.FieldError
	if err := schema.ValidateName(in.Name); err != nil {
		details = append(details, schema.FieldError{Field: "name", Message: err.Error()})
	}
	if in.Role != schema.RoleMonitor {
		details = append(details, schema.FieldError{Field: "role", Message: fmt.Sprintf("must be %q", schema.RoleMonitor)})
	}
	if in.Token != "" {
		details = append(details, schema.FieldError{Field: "token", Message: "is issued by the hub"})
	}
	if details != nil {
		writeStatus(w, http.StatusBadRequest, "Invalid", "Credential is invalid", details)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, exists := h.credentials[in.Name]; exists {
		writeStatus(w, http.StatusConflict, "AlreadyExists", fmt.Sprintf("credential %q already exists", in.Name), nil)
		return
	}
	tok := h.addCredential(in.Name, in.Role)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, schema.Credential{Name: in.Name, Role: in.Role, Token: tok})
}

func (h *Hub) deleteCredential(w http.ResponseWriter, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.credentials[name]
	if !ok {
		writeStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf("credential %q not found", name), nil)
		return
	}
	delete(h.credentials, name)
	writeJSON(w, http.StatusOK, schema.Credential{Name: name, Role: c.role})
}
