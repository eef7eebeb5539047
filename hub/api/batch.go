package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/fleetmq/fleet/schema"
)

// registerDevices handles POST /v1/devices:batch: many devices registered
// and given tokens in one call (schema.DeviceBatch). Every item is
// validated before any is stored; an invalid one is a 400 naming it
// (items[i]); the store writes them in transactions of 500.
func (s *Server) registerDevices(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	devs, err := decodeDeviceBatch(body)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	regs, err := s.store.RegisterDevices(r.Context(), devs)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	out := schema.DeviceBatchResult{Items: make([]schema.DeviceBatchItemResult, len(regs))}
	created, names := 0, make([]string, 0, len(regs))
	for i, reg := range regs {
		out.Items[i] = schema.DeviceBatchItemResult{Name: reg.Name, Action: reg.Action, Token: reg.Token}
		names = append(names, "devices/"+reg.Name)
		if reg.Action == schema.ActionCreated {
			created++
		}
	}
	detail := fmt.Sprintf("%d devices: %d created, %d existed; %d tokens issued", len(regs), created, len(regs)-created, len(regs))
	noteAudit(r, appliedObjects(names), detail)
	s.log.Info("registered devices", "devices", len(regs), "created", created)
	w.Header().Set("Cache-Control", "no-store")
	WriteJSON(w, http.StatusOK, out)
}

// decodeDeviceBatch decodes and checks a DeviceBatch: every bad item is
// reported, each named items[i] (and its name).
func decodeDeviceBatch(body []byte) ([]*schema.Device, error) {
	var b schema.DeviceBatch
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return nil, badRequest("decode the body as a DeviceBatch ({\"items\":[{\"name\":...,\"labels\":{...}}]}): %v", err)
	}
	switch n := len(b.Items); {
	case n == 0:
		return nil, invalidParam("items", "no devices: want 1 to %d", schema.MaxDeviceBatch)
	case n > schema.MaxDeviceBatch:
		return nil, invalidParam("items", "%d devices: at most %d in one call, send the rest in another", n, schema.MaxDeviceBatch)
	}
	var bad []schema.FieldError
	seen := make(map[string]int, len(b.Items))
	devs := make([]*schema.Device, len(b.Items))
	for i, it := range b.Items {
		at := fmt.Sprintf("items[%d]", i)
		if j, dup := seen[it.Name]; dup && it.Name != "" {
			bad = append(bad, schema.FieldError{Field: at + ".name", Message: fmt.Sprintf("%q is also items[%d]", schema.Truncate(it.Name, 80, "..."), j)})
			continue
		}
		seen[it.Name] = i
		d := &schema.Device{
			TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDevice},
			Metadata: schema.ObjectMeta{Name: it.Name, Labels: it.Labels},
			Spec:     schema.DeviceSpec{Description: it.Description},
		}
		schema.Default(d)
		if err := schema.Validate(d); err != nil {
			var ve *schema.ValidationError
			if !errors.As(err, &ve) {
				return nil, err
			}
			for _, fe := range ve.Errors {
				fe.Field = at + "." + strings.TrimPrefix(fe.Field, "metadata.")
				bad = append(bad, fe)
			}
			continue
		}
		devs[i] = d
	}
	if len(bad) > 0 {
		return nil, &schema.ValidationError{Kind: "DeviceBatch", Errors: bad}
	}
	return devs, nil
}
