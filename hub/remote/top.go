package remote

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/schema"
)

// maxTopFanOut bounds the top requests GET /v1/top has in flight.
const maxTopFanOut = 64

// Top asks an online device for a TopReport and keeps it as the device's
// last; if the device is offline or does not answer within TopTimeout
// (or ctx), it returns the last one kept, marked Stale, or nil.
func (m *Manager) Top(ctx context.Context, device, uid string) *schema.TopReport {
	t, _ := m.top(ctx, device, uid)
	return t
}

// top is Top, and the device's refusal if it refused the request as
// unauthenticated.
func (m *Manager) top(ctx context.Context, device, uid string) (*schema.TopReport, *schema.Response) {
	if online, _ := m.model.Presence(device, uid); online {
		t, refusal := m.askTop(ctx, device, uid)
		if t != nil || refusal != nil {
			return t, refusal
		}
	}
	last := m.model.Top(device, uid)
	if last == nil {
		return nil, nil
	}
	t := *last
	t.Stale = true
	return &t, nil
}

// askTop sends a top request and waits for the answer: the report, or
// the device's refusal of the request as unauthenticated (recorded as a
// hub event), or neither.
func (m *Manager) askTop(ctx context.Context, device, uid string) (*schema.TopReport, *schema.Response) {
	o, err := m.open(ctx, device, schema.Request{Op: schema.OpTop}, false, m.opts.TopTimeout)
	if err != nil {
		return nil, nil
	}
	result := "canceled"
	defer func() { m.close(o, result) }()
	r, err := m.waitFirst(ctx, o, m.opts.TopTimeout)
	if err != nil {
		_, result = statusForErr(device, "top", err, m.opts.TopTimeout)
		return nil, nil
	}
	result = resultOf(r)
	if r.Done && r.Code == schema.CodeUnauthenticated {
		m.refused(nil, device, uid, schema.OpTop, r)
		return nil, r
	}
	if !r.Done || r.Top == nil || r.Code != "" {
		if r.Code == "" {
			result = "malformed"
		}
		return nil, nil
	}
	t := *r.Top
	t.TypeMeta = schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "TopReport"}
	t.Device, t.Stale = device, false
	if t.Time.IsZero() {
		t.Time = time.Now().UTC()
	}
	m.model.SetTop(device, uid, &t)
	cp := t
	return &cp, nil
}

// serveTop answers a device's TopReport (GET /v1/devices/{device}/top).
func (m *Manager) serveTop(w http.ResponseWriter, r *http.Request) {
	device, uid, ok := m.device(w, r)
	if !ok {
		return
	}
	t, refusal := m.top(r.Context(), device, uid)
	if refusal != nil {
		st := statusForCode(device, refusal)
		auditRefused(r, device, schema.OpTop, st)
		api.WriteStatus(w, st)
		return
	}
	if t == nil {
		online, lastSeen := m.model.Presence(device, uid)
		msg := fmt.Sprintf("device %s did not answer the top request within %s, and the hub has no earlier report", device, m.opts.TopTimeout)
		if !online {
			msg = offlineMessage(device, lastSeen) + ", and the hub has no earlier report"
		}
		api.WriteStatus(w, api.NewStatus(http.StatusServiceUnavailable, api.ReasonServiceUnavailable, msg, nil))
		return
	}
	api.WriteJSON(w, http.StatusOK, t)
}

// serveTopList answers the TopReports of the selected devices (GET
// /v1/top?labelSelector=): asked at once, within TopTimeout overall; the
// last known (stale) for those offline or silent; none for those the hub
// has no report of.
func (m *Manager) serveTopList(w http.ResponseWriter, r *http.Request) {
	sel, err := api.ParseSelector(r.URL.Query().Get("labelSelector"))
	if err != nil {
		api.WriteError(w, r, m.log, err)
		return
	}
	devices := m.model.Devices(sel)
	ctx, cancel := context.WithTimeout(r.Context(), m.opts.TopTimeout)
	defer cancel()
	out := make([]*schema.TopReport, len(devices))
	sem := make(chan struct{}, maxTopFanOut)
	var wg sync.WaitGroup
	for i, d := range devices {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			out[i] = m.Top(ctx, d.Name, d.UID) // out of time: the stale one, at once
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			out[i] = m.Top(ctx, d.Name, d.UID)
		})
	}
	wg.Wait()
	list := schema.TopReportList{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "schema.TopReportList"}, Items: []schema.TopReport{}}
	for _, t := range out { // devices come sorted by name
		if t != nil {
			list.Items = append(list.Items, *t)
		}
	}
	api.WriteJSON(w, http.StatusOK, list)
}

// serveCrashReports answers the device's crash reports, newest first (GET
// /v1/devices/{device}/crashreports).
func (m *Manager) serveCrashReports(w http.ResponseWriter, r *http.Request) {
	if !admin(w, r, "read crash reports (they hold container logs)") {
		return
	}
	device, uid, ok := m.device(w, r)
	if !ok {
		return
	}
	api.WriteJSON(w, http.StatusOK, schema.CrashReportList{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "schema.CrashReportList"},
		Items:    m.model.CrashReports(device, uid),
	})
}
