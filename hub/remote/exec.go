package remote

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/schema"
)

// upgradeRequested reports whether the request asks for the exec
// protocol (Connection: Upgrade, Upgrade: fleet-exec.v1).
func upgradeRequested(r *http.Request) bool {
	upgrade := false
	for _, v := range r.Header.Values("Connection") {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				upgrade = true
			}
		}
	}
	if !upgrade {
		return false
	}
	for _, v := range r.Header.Values("Upgrade") {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), schema.ExecUpgradeProtocol) {
				return true
			}
		}
	}
	return false
}

// parseExecOptions reads the exec route's path and query.
func parseExecOptions(r *http.Request) (schema.ExecOptions, error) {
	q := &query{v: r.URL.Query()}
	o := schema.ExecOptions{Pod: r.PathValue("pod"), Command: q.v["command"]}
	if err := schema.ValidateName(o.Pod); err != nil {
		q.fail("pod", "%v", err)
	}
	o.Container = q.name("container", false)
	o.TTY = q.boolean("tty")
	o.Stdin = q.boolean("stdin")
	cols, hasCols := q.count("cols")
	rows, hasRows := q.count("rows")
	if cols > 65535 {
		q.fail("cols", "%d: at most 65535", cols)
	}
	if rows > 65535 {
		q.fail("rows", "%d: at most 65535", rows)
	}
	if (hasCols || hasRows) && o.TTY {
		o.Size = &schema.TermSize{Cols: uint16(cols), Rows: uint16(rows)}
	}
	if len(o.Command) == 0 || o.Command[0] == "" {
		q.fail("command", "required: give the command and its arguments as repeated command parameters")
	}
	if q.err != nil {
		return o, q.err
	}
	// The device's own checks, so that the client hears of them now.
	b, err := json.Marshal(schema.Request{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindRequest},
		ID:       strings.Repeat("0", 2*schema.RequestIDBytes), Device: "d", Op: schema.OpExec, Exec: &o,
	})
	if err == nil {
		_, err = schema.DecodeRequest(b)
	}
	if err != nil {
		q.fail("command", "%s", strings.TrimPrefix(err.Error(), "request: exec."))
	}
	return o, q.err
}

// serveExec runs a command in a container on the device (POST
// /v1/devices/{device}/pods/{pod}/exec), over an upgraded connection
// carrying schema/execframe.go frames.
func (m *Manager) serveExec(w http.ResponseWriter, r *http.Request) {
	if !admin(w, r, "exec in containers") {
		return
	}
	if !upgradeRequested(r) {
		api.WriteStatus(w, api.NewStatus(http.StatusBadRequest, api.ReasonBadRequest,
			"exec needs the headers Connection: Upgrade and Upgrade: "+schema.ExecUpgradeProtocol, nil))
		return
	}
	opts, err := parseExecOptions(r)
	if err != nil {
		api.WriteError(w, r, m.log, err)
		return
	}
	device, uid, ok := m.device(w, r)
	if !ok {
		return
	}
	if online, lastSeen := m.model.Presence(device, uid); !online {
		api.WriteStatus(w, api.NewStatus(http.StatusServiceUnavailable, api.ReasonServiceUnavailable, offlineMessage(device, lastSeen), nil))
		if m.m != nil {
			m.m.RemoteRequests.WithLabelValues(schema.OpExec, "offline").Inc()
		}
		return
	}
	what := fmt.Sprintf("%q in %s", opts.Command, podContainer(opts.Pod, opts.Container))
	m.audit(r, device, uid, EventExec, fmt.Sprintf("%s ran %s (tty=%t)", who(r), what, opts.TTY))

	o, first, st := m.begin(r.Context(), device, schema.Request{Op: schema.OpExec, Exec: &opts}, "exec")
	if st != nil {
		api.WriteStatus(w, *st)
		m.audit(r, device, uid, EventExecExited, fmt.Sprintf("%s did not start: %s", what, st.Message))
		return
	}
	result := "canceled"
	defer func() { m.close(o, result) }()
	if first.Done && first.Code != "" {
		result = resultOf(first)
		if first.Code == schema.CodeUnauthenticated {
			m.refused(r, device, uid, schema.OpExec, first)
		}
		st := statusForCode(device, first)
		api.WriteStatus(w, st)
		m.audit(r, device, uid, EventExecExited, fmt.Sprintf("%s did not start: %s", what, st.Message))
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		api.WriteStatus(w, api.NewStatus(http.StatusInternalServerError, api.ReasonInternalError, "exec: cannot take over the connection: "+err.Error(), nil))
		return
	}
	exit := m.execSession(conn, brw.Reader, o, opts)
	result = exit.result
	m.audit(r, device, uid, EventExecExited, fmt.Sprintf("%s ended: %s", what, exit.describe()))
}

// execEnd is how an exec session ended.
type execEnd struct {
	exit   *schema.ExecExit // nil: the client went away
	result string
}

func (e execEnd) describe() string {
	switch {
	case e.exit == nil:
		return "the client went away"
	case e.exit.Error != "":
		return fmt.Sprintf("exit code %d (%s)", e.exit.ExitCode, e.exit.Error)
	}
	return fmt.Sprintf("exit code %d", e.exit.ExitCode)
}

// execSession switches the connection to the exec protocol and relays
// frames both ways until the command ends, the client goes away or the
// hub stops. It closes conn.
func (m *Manager) execSession(conn net.Conn, br *bufio.Reader, o *op, opts schema.ExecOptions) execEnd {
	defer conn.Close()
	_ = conn.SetDeadline(time.Time{})
	write := func(typ byte, payload []byte) error {
		_ = conn.SetWriteDeadline(time.Now().Add(m.opts.WriteTimeout))
		return schema.WriteFrame(conn, typ, payload)
	}
	_ = conn.SetWriteDeadline(time.Now().Add(m.opts.WriteTimeout))
	if _, err := conn.Write([]byte("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + schema.ExecUpgradeProtocol + "\r\n\r\n")); err != nil {
		return execEnd{result: "canceled"}
	}

	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		m.pumpInput(ctx, br, o, opts)
	}()
	defer func() {
		cancel()
		conn.Close() // ends the reader
		<-gone
	}()

	end := func(e schema.ExecExit, result string) execEnd {
		b, err := json.Marshal(e)
		if err == nil {
			_ = write(schema.FrameExit, b)
		}
		return execEnd{exit: &e, result: result}
	}
	keepalive := time.NewTicker(m.opts.Keepalive)
	defer keepalive.Stop()
	for {
		r, err := o.take()
		if err != nil {
			return end(schema.ExecExit{ExitCode: 1, Code: schema.CodeInternal, Error: err.Error()}, "cutoff")
		}
		if r == nil {
			select {
			case <-o.wake:
			case <-o.kick:
				m.ack(ctx, o, true)
			case <-keepalive.C:
				m.ack(ctx, o, true)
			case <-gone:
				return execEnd{result: "canceled"}
			case <-m.stop:
				return end(schema.ExecExit{ExitCode: 1, Code: schema.CodeUnavailable, Error: errStopping.Error()}, "canceled")
			}
			continue
		}
		if len(r.Data) > 0 {
			typ := schema.FrameStdout
			if r.Stream == schema.StreamStderr {
				typ = schema.FrameStderr
			}
			if err := write(typ, r.Data); err != nil {
				return execEnd{result: "canceled"}
			}
			if m.m != nil {
				m.m.RemoteBytes.WithLabelValues(schema.OpExec).Add(float64(len(r.Data)))
			}
		}
		if r.Done {
			e := schema.ExecExit{Code: r.Code, Error: r.Error}
			switch {
			case r.ExitCode != nil:
				e.ExitCode = *r.ExitCode
			case r.Code != "" || r.Error != "":
				e.ExitCode = 1
			}
			if r.Code != "" && r.Error == "" {
				e.Error = fmt.Sprintf("device %s: %s", o.device, r.Code)
			}
			return end(e, resultOf(r))
		}
		m.ack(ctx, o, false)
	}
}

// pumpInput reads the client's frames and sends them to the device as
// stdin, EOF and resize requests, until the connection ends or a frame is
// malformed.
func (m *Manager) pumpInput(ctx context.Context, br *bufio.Reader, o *op, opts schema.ExecOptions) {
	var buf []byte
	var seq int64 // of stdin requests: the device puts them back in order
	for {
		typ, payload, err := schema.ReadFrame(br, buf)
		if err != nil {
			return
		}
		buf = payload[:0]
		req := schema.Request{ID: o.id, Device: o.device}
		switch typ {
		case schema.FrameStdin:
			if !opts.Stdin {
				continue
			}
			for len(payload) > 0 {
				n := min(len(payload), schema.MaxChunkBytes)
				seq++
				req.Op, req.Data, req.Seq = schema.OpStdin, payload[:n], seq
				if err := m.send(ctx, req); err != nil {
					m.log.Debug("exec stdin", "device", o.device, "err", err)
				}
				payload = payload[n:]
			}
			continue
		case schema.FrameStdinEOF:
			seq++
			req.Op, req.EOF, req.Seq = schema.OpStdin, true, seq
		case schema.FrameResize:
			var size schema.TermSize
			if err := json.Unmarshal(payload, &size); err != nil {
				m.log.Debug("exec resize frame does not decode; ending the session", "device", o.device, "err", err)
				return
			}
			req.Op, req.Size = schema.OpResize, &size
		default:
			m.log.Debug("exec frame of unknown type; ending the session", "device", o.device, "type", typ)
			return
		}
		if err := m.send(ctx, req); err != nil {
			m.log.Debug("exec input", "device", o.device, "op", req.Op, "err", err)
		}
	}
}
