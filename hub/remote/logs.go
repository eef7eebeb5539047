package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/schema"
)

// parseLogOptions reads the logs route's path and query.
func parseLogOptions(r *http.Request) (schema.LogOptions, error) {
	q := &query{v: r.URL.Query()}
	o := schema.LogOptions{Pod: r.PathValue("pod")}
	if err := schema.ValidateName(o.Pod); err != nil {
		q.fail("pod", "%v", err)
	}
	o.Container = q.name("container", false)
	if n, ok := q.count("tailLines"); ok {
		o.TailLines = &n
	}
	o.SinceSeconds, _ = q.count("sinceSeconds")
	o.LimitBytes, _ = q.count("limitBytes")
	o.Timestamps = q.boolean("timestamps")
	o.Follow = q.boolean("follow")
	o.Previous = q.boolean("previous")
	return o, q.err
}

func podContainer(pod, container string) string {
	if container == "" {
		return pod
	}
	return pod + "/" + container
}

// serveLogs streams a container's log from the device (GET
// /v1/devices/{device}/pods/{pod}/log), or the crash report the hub holds
// when the device is offline.
func (m *Manager) serveLogs(w http.ResponseWriter, r *http.Request) {
	if !admin(w, r, "read container logs") {
		return
	}
	opts, err := parseLogOptions(r)
	if err != nil {
		api.WriteError(w, r, m.log, err)
		return
	}
	device, uid, ok := m.device(w, r)
	if !ok {
		return
	}
	m.audit(r, device, uid, EventLogsRequested, fmt.Sprintf("%s read logs of %s (follow=%t, previous=%t)",
		who(r), podContainer(opts.Pod, opts.Container), opts.Follow, opts.Previous))

	online, lastSeen := m.model.Presence(device, uid)
	if !online {
		if cr, ok := m.model.CrashReport(device, uid, opts.Pod, opts.Container); ok {
			since := "device " + device + " is offline"
			if !lastSeen.IsZero() {
				since += " since " + lastSeen.UTC().Format(time.RFC3339)
			}
			m.serveCrashReport(w, cr, since)
		} else {
			api.WriteStatus(w, api.NewStatus(http.StatusServiceUnavailable, api.ReasonServiceUnavailable, offlineMessage(device, lastSeen), nil))
		}
		if m.m != nil {
			m.m.RemoteRequests.WithLabelValues(schema.OpLogs, "offline").Inc()
		}
		return
	}

	o, first, st := m.begin(r.Context(), device, schema.Request{Op: schema.OpLogs, Logs: &opts}, "logs")
	if st != nil {
		api.WriteStatus(w, *st)
		return
	}
	result := "canceled"
	defer func() { m.close(o, result) }()
	if first.Done && first.Code != "" {
		result = resultOf(first)
		if first.Code == schema.CodeUnauthenticated {
			m.refused(r, device, uid, schema.OpLogs, first)
		}
		if opts.Previous && first.Code == schema.CodeNotFound {
			if cr, ok := m.model.CrashReport(device, uid, opts.Pod, opts.Container); ok {
				m.serveCrashReport(w, cr, fmt.Sprintf("device %s has no previous log of %s", device, podContainer(cr.Pod, cr.Container)))
				return
			}
		}
		api.WriteStatus(w, statusForCode(device, first))
		return
	}
	result = m.streamLogs(r.Context(), w, o)
}

// serveCrashReport answers a crash report's log tail, with why.
func (m *Manager) serveCrashReport(w http.ResponseWriter, cr schema.CrashReport, why string) {
	how := "exited"
	if cr.ExitCode != nil {
		how = fmt.Sprintf("exited with code %d", *cr.ExitCode)
	} else if cr.Reason != "" {
		how = "stopped (" + cr.Reason + ")"
	}
	warn := fmt.Sprintf("%s; showing the last lines the device reported when %s/%s %s at %s",
		why, cr.Pod, cr.Container, how, cr.Time.UTC().Format(time.RFC3339))
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set(schema.HeaderLogSource, schema.LogSourceCrashReport)
	h.Set(schema.HeaderWarning, strings.ReplaceAll(warn, "\n", " "))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(cr.LogTail))
}

// streamLogs writes the op's data to the client as it comes, until the
// device ends it, the client goes away or the hub stops. A failure after
// the body started is the Fleet-Error trailer. It returns the result for
// the metrics.
func (m *Manager) streamLogs(ctx context.Context, w http.ResponseWriter, o *op) string {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{}) // the stream outlives the server's read timeout
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set(schema.HeaderLogSource, schema.LogSourceDevice)
	h.Set("Trailer", schema.TrailerError)
	_ = rc.SetWriteDeadline(time.Now().Add(m.opts.WriteTimeout))
	w.WriteHeader(http.StatusOK)
	if err := flush(rc); err != nil {
		return "canceled"
	}
	fail := func(msg string) {
		_ = rc.SetWriteDeadline(time.Now().Add(m.opts.WriteTimeout))
		h.Set(schema.TrailerError, msg)
	}
	keepalive := time.NewTicker(m.opts.Keepalive)
	defer keepalive.Stop()
	for {
		if m.beforeTake != nil {
			m.beforeTake()
		}
		r, err := o.take()
		if err != nil {
			fail(err.Error())
			return "cutoff"
		}
		if r == nil {
			select {
			case <-o.wake:
			case <-o.kick:
				m.ack(ctx, o, true)
			case <-keepalive.C:
				m.ack(ctx, o, true)
			case <-ctx.Done():
				return "canceled"
			case <-m.stop:
				fail(errStopping.Error())
				return "canceled"
			}
			continue
		}
		if len(r.Data) > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(m.opts.WriteTimeout))
			if _, err := w.Write(r.Data); err != nil {
				return "canceled"
			}
			if err := flush(rc); err != nil {
				return "canceled"
			}
			if m.m != nil {
				m.m.RemoteBytes.WithLabelValues(schema.OpLogs).Add(float64(len(r.Data)))
			}
		}
		if r.Done {
			if r.Code != "" || r.Error != "" {
				st := statusForCode(o.device, r)
				fail(st.Message)
			}
			return resultOf(r)
		}
		m.ack(ctx, o, false)
	}
}

func flush(rc *http.ResponseController) error {
	if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}
