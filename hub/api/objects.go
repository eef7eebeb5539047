package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// apply handles POST /v1/apply: every document is validated before any is
// stored, and all are stored in one transaction.
func (s *Server) apply(w http.ResponseWriter, r *http.Request) {
	dry, err := dryRun(r)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	objs, err := decodeObjects(body)
	if err == nil {
		err = s.admitAgentRollouts(r.Context(), objs)
	}
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	results, err := s.store.ApplyAll(r.Context(), objs, dry)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	resp := schema.ApplyResponse{DryRun: dry, Results: make([]schema.ApplyResult, 0, len(results))}
	var changed, names []string
	for _, res := range results {
		resource, _ := store.ResourceForKind(res.Object.GetTypeMeta().Kind)
		names = append(names, resource+"/"+res.Object.GetMetadata().Name)
		resp.Warnings = append(resp.Warnings, schema.SecretEnvWarnings(res.Object)...)
		raw, err := json.Marshal(res.Object)
		if err != nil {
			WriteError(w, r, s.log, fmt.Errorf("encode %s: %w", res.Object.GetMetadata().Name, err))
			return
		}
		resp.Results = append(resp.Results, schema.ApplyResult{
			Kind: res.Object.GetTypeMeta().Kind, Name: res.Object.GetMetadata().Name,
			Action: res.Action, Object: raw,
		})
		if res.Action != schema.ActionUnchanged {
			changed = append(changed, names[len(names)-1]+" "+res.Action)
		}
		if !dry && res.Action != schema.ActionUnchanged {
			s.log.Info("applied", "kind", res.Object.GetTypeMeta().Kind, "name", res.Object.GetMetadata().Name,
				"action", res.Action, "resourceVersion", res.Object.GetMetadata().ResourceVersion)
		}
	}
	if len(changed) == 0 {
		changed = append(changed, "nothing changed")
	}
	noteAudit(r, appliedObjects(names), strings.Join(changed, ", "))
	WriteJSON(w, http.StatusOK, resp)
}

// maxAuditObjects is how many objects an apply's audit entry names in its
// OBJECT; the DETAIL lists every one that changed.
const maxAuditObjects = 3

// appliedObjects is the OBJECT of an apply's audit entry: the objects of
// the manifest (resource/name), the first maxAuditObjects of them and
// how many more.
func appliedObjects(names []string) string {
	if len(names) <= maxAuditObjects {
		return strings.Join(names, ",")
	}
	return fmt.Sprintf("%s (+%d more)", strings.Join(names[:maxAuditObjects], ","), len(names)-maxAuditObjects)
}

// listOrWatch handles GET /v1/{kind}[?watch=true].
func (s *Server) listOrWatch(w http.ResponseWriter, r *http.Request) {
	kind, err := kindOf(r)
	if err == nil {
		err = mayRead(r, kind)
	}
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	q := r.URL.Query()
	sel, err := ParseSelector(q.Get("labelSelector"))
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	switch v := q.Get("watch"); v {
	case "true", "1":
		s.watch(w, r, kind, sel)
		return
	case "", "false", "0":
	default:
		WriteError(w, r, s.log, invalidParam("watch", "unsupported value %q: want true or false", schema.Truncate(v, 80, "...")))
		return
	}
	s.list(w, r, kind, sel)
}

// list writes the stored JSON of the objects as they are: no decoding
// (but for the labels, with a selector) and no re-encoding. With limit it
// writes one page (pages.go).
func (s *Server) list(w http.ResponseWriter, r *http.Request, kind string, sel schema.LabelSelector) {
	q := r.URL.Query()
	pg, err := s.parsePage(q, kind, q.Get("labelSelector"))
	after := ""
	if err == nil && pg.Token != nil {
		after = pg.Token.After
		err = s.store.ListRevisionHeld(pg.Token.Rev)
	}
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	var items bytes.Buffer
	n, last, more := 0, "", false
	redact := monitorView(r, kind)
	rev, err := s.store.ListRawNamedFrom(r.Context(), kind, after, func(name string, raw []byte) error {
		if !sel.Empty() && !matches(raw, sel) {
			return nil
		}
		if pg.Limit > 0 && n == pg.Limit {
			more = true
			return store.ErrStopList
		}
		if n > 0 {
			items.WriteByte(',')
		}
		if redact {
			items.Write(redactDeployment(s.withStatus(kind, name, raw)))
		} else {
			writeWithStatus(&items, raw, s.statusJSON(kind, name))
		}
		n, last = n+1, name
		return nil
	})
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	meta := schema.ListMeta{ResourceVersion: strconv.FormatUint(rev, 10)}
	if pg.Token != nil {
		rev = pg.Token.Rev
		meta.ResourceVersion = strconv.FormatUint(rev, 10)
	}
	if more {
		meta.Continue = s.sealPageToken(pageToken{Kind: kind, Selector: q.Get("labelSelector"), After: last, Rev: rev})
	}
	s.writeList(w, kind, meta, items.Bytes())
}

// writeList writes a list's answer around its items, already JSON.
func (s *Server) writeList(w http.ResponseWriter, kind string, meta schema.ListMeta, items []byte) {
	head, err := json.Marshal(struct {
		schema.TypeMeta `json:",inline"`
		Metadata        schema.ListMeta `json:"metadata"`
	}{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: store.ListKindFor(kind)},
		Metadata: meta,
	})
	if err != nil {
		WriteJSON(w, http.StatusInternalServerError, NewStatus(http.StatusInternalServerError, ReasonInternalError, "encode list: "+err.Error(), nil))
		return
	}
	body := make([]byte, 0, len(head)+len(items)+16)
	body = append(body, head[:len(head)-1]...) // without the closing brace
	body = append(body, `,"items":[`...)
	body = append(body, items...)
	body = append(body, "]}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(body); err != nil {
		s.log.Debug("write list", "err", err)
	}
}

// writeRequest parses what create and update share: the kind, the dry-run
// flag and the one object in the body. On error it has answered the request.
func (s *Server) writeRequest(w http.ResponseWriter, r *http.Request) (dry bool, obj schema.Object, ok bool) {
	kind, err := kindOf(r)
	if err == nil {
		dry, err = dryRun(r)
	}
	if err == nil {
		obj, err = decodeOne(w, r, kind)
	}
	if err == nil {
		err = s.admitAgentRollouts(r.Context(), []schema.Object{obj})
	}
	if err != nil {
		WriteError(w, r, s.log, err)
		return false, nil, false
	}
	return dry, obj, true
}

// create handles POST /v1/{kind}.
func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	dry, obj, ok := s.writeRequest(w, r)
	if !ok {
		return
	}
	kind := obj.GetTypeMeta().Kind
	out, err := s.store.Create(r.Context(), obj, dry)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	if resource, ok := store.ResourceForKind(kind); ok {
		noteAudit(r, resource+"/"+out.GetMetadata().Name, "")
	}
	if !dry {
		s.log.Info("created", "kind", kind, "name", out.GetMetadata().Name, "resourceVersion", out.GetMetadata().ResourceVersion)
	}
	WriteJSON(w, http.StatusCreated, out)
}

// get handles GET /v1/{kind}/{name}.
func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	kind, err := kindOf(r)
	if err == nil {
		err = mayRead(r, kind)
	}
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	name := r.PathValue("name")
	out, err := s.store.Get(r.Context(), kind, name)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	raw, err := json.Marshal(out)
	if err != nil {
		WriteError(w, r, s.log, fmt.Errorf("encode %s %q: %w", kind, name, err))
		return
	}
	var b bytes.Buffer
	if monitorView(r, kind) {
		b.Write(redactDeployment(s.withStatus(kind, name, raw)))
	} else {
		writeWithStatus(&b, raw, s.statusJSON(kind, name))
	}
	b.WriteByte('\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.Bytes())
}

// statusJSON is the status to show for an object, or nil.
func (s *Server) statusJSON(kind, name string) []byte {
	if s.opts.Status == nil {
		return nil
	}
	switch kind {
	case schema.KindDevice:
		return s.opts.Status.DeviceStatusJSON(name)
	case schema.KindDeployment:
		return s.opts.Status.DeploymentStatusJSON(name)
	}
	return nil
}

// writeWithStatus writes the JSON object raw with "status": status added,
// replacing the status stored with it (a Deployment's status.revision;
// the status the hub derives carries it as well). Without a status, or if
// raw is not an object, raw is written as is.
func writeWithStatus(b *bytes.Buffer, raw, status []byte) {
	end := bytes.LastIndexByte(raw, '}')
	if len(status) == 0 || end < 1 {
		b.Write(raw)
		return
	}
	if bytes.Contains(raw, []byte(`"status":`)) {
		raw = withoutStatus(raw)
		end = bytes.LastIndexByte(raw, '}')
	}
	body := bytes.TrimRight(raw[:end], " \t\r\n")
	b.Write(body)
	if len(body) > 0 && body[len(body)-1] != '{' {
		b.WriteByte(',')
	}
	b.WriteString(`"status":`)
	b.Write(status)
	b.Write(raw[end:])
}

// update handles PUT /v1/{kind}/{name}.
func (s *Server) update(w http.ResponseWriter, r *http.Request) {
	dry, obj, ok := s.writeRequest(w, r)
	if !ok {
		return
	}
	kind := obj.GetTypeMeta().Kind
	name := r.PathValue("name")
	if got := obj.GetMetadata().Name; got != name {
		WriteError(w, r, s.log, &schema.ValidationError{Kind: kind, Name: got, Errors: []schema.FieldError{
			{Field: "metadata.name", Message: fmt.Sprintf("%q does not match the name in the path, %q", schema.Truncate(got, 80, "..."), schema.Truncate(name, 80, "..."))},
		}})
		return
	}
	out, err := s.store.Update(r.Context(), obj, dry)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	if !dry {
		s.log.Info("updated", "kind", kind, "name", name, "resourceVersion", out.GetMetadata().ResourceVersion)
	}
	WriteJSON(w, http.StatusOK, out)
}

// delete handles DELETE /v1/{kind}/{name}[?resourceVersion=N].
func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	kind, err := kindOf(r)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	dry, err := dryRun(r)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	rv, ok, err := parseRV(r)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	want := ""
	if ok {
		want = strconv.FormatUint(rv, 10)
	}
	name := r.PathValue("name")
	out, err := s.store.Delete(r.Context(), kind, name, want, dry)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	if !dry {
		s.log.Info("deleted", "kind", kind, "name", name, "resourceVersion", out.GetMetadata().ResourceVersion)
	}
	WriteJSON(w, http.StatusOK, out)
}

// issueToken handles POST /v1/devices/{name}/token.
func (s *Server) issueToken(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	tok, err := s.store.IssueToken(r.Context(), name)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	s.log.Info("issued device token", "device", name)
	w.Header().Set("Cache-Control", "no-store")
	WriteJSON(w, http.StatusOK, schema.DeviceCredentials{Name: name, Token: tok})
}

// withoutStatus returns the JSON object raw without its top-level status
// field; raw as is if it does not decode as an object. Object fields come
// out in key order, which for Fleet objects (apiVersion, kind, metadata,
// spec) is the order they are stored in.
func withoutStatus(raw []byte) []byte {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return raw
	}
	if _, ok := fields["status"]; !ok {
		return raw
	}
	delete(fields, "status")
	out, err := json.Marshal(fields)
	if err != nil {
		return raw
	}
	return out
}

// deploymentStatus handles GET /v1/deployments/{name}/status: the
// status the hub derives for the deployment (schema.DeploymentStatus),
// which every role may read.
func (s *Server) deploymentStatus(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if _, err := s.store.Get(r.Context(), schema.KindDeployment, name); err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	status := s.statusJSON(schema.KindDeployment, name)
	if status == nil {
		status = []byte("{}")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(status, '\n'))
}
