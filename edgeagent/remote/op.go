package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/wake"
	"github.com/fleetmq/fleet/schema"
)

// opError is how an operation fails: a Code for programs and a message
// naming what was asked.
type opError struct {
	code string
	msg  string
}

func (e *opError) Error() string { return e.msg }

func errorf(code, format string, args ...any) error {
	return &opError{code: code, msg: fmt.Sprintf(format, args...)}
}

// errTimeout cancels an operation whose lease expired.
var errTimeout = errors.New("lease expired")

// op is one live operation.
type op struct {
	s      *Server
	req    *schema.Request
	window int64
	ctx    context.Context
	cancel context.CancelCauseFunc
	lease  *time.Timer

	sendMu sync.Mutex // serialises responses: Seq order is publish order
	seq    int64

	mu        sync.Mutex
	acked     int64
	heard     time.Time
	ackWake   chan struct{}
	stdin     stdinQueue
	stdinWake chan struct{}
	resize    chan runtime.TermSize
}

func newOp(s *Server, parent context.Context, r *schema.Request) *op {
	ctx, cancel := context.WithCancelCause(parent)
	w := int64(r.Window)
	if w <= 0 {
		w = schema.DefaultRequestWindow
	}
	o := &op{
		s: s, req: r, window: w, ctx: ctx, cancel: cancel,
		heard: s.o.Now(), ackWake: wake.New(), stdinWake: wake.New(),
		resize: make(chan runtime.TermSize, 1),
	}
	o.mu.Lock()
	o.lease = time.AfterFunc(s.o.Lease, o.checkLease)
	o.mu.Unlock()
	return o
}

// checkLease cancels the operation when the hub has been silent for the
// lease, else re-arms itself.
func (o *op) checkLease() {
	o.mu.Lock()
	left := o.s.o.Lease - o.s.o.Now().Sub(o.heard)
	if left > 0 {
		o.lease.Reset(left)
		o.mu.Unlock()
		return
	}
	o.mu.Unlock()
	o.cancel(errTimeout)
}

// control applies an ack, stdin, resize or cancel request.
func (o *op) control(r *schema.Request) {
	o.mu.Lock()
	o.heard = o.s.o.Now()
	switch r.Op {
	case schema.OpAck:
		if r.Ack > o.acked {
			o.acked = r.Ack
			wake.Signal(o.ackWake)
		}
	case schema.OpStdin:
		if !o.stdin.add(r) {
			o.s.log.Warn("exec input dropped: too much unread", "id", o.req.ID)
		}
		wake.Signal(o.stdinWake)
	case schema.OpResize:
		sz := runtime.TermSize{Cols: r.Size.Cols, Rows: r.Size.Rows}
		select { // keep only the newest size
		case <-o.resize:
		default:
		}
		o.resize <- sz
	}
	o.mu.Unlock()
	if r.Op == schema.OpCancel {
		o.cancel(context.Canceled)
	}
}

// run runs the operation and sends its Done.
func (o *op) run() {
	defer func() {
		o.mu.Lock()
		o.lease.Stop()
		o.mu.Unlock()
	}()
	defer o.cancel(nil)
	var done schema.Response
	switch o.req.Op {
	case schema.OpLogs:
		done = o.result(o.logs())
	case schema.OpExec:
		done = o.exec()
	case schema.OpTop:
		top, err := o.s.top(o.ctx)
		done = o.result(err)
		done.Top = top
	}
	done.Done = true
	o.sendDone(&done)
}

// result maps an operation's error to the fields of its Done.
func (o *op) result(err error) schema.Response {
	var oe *opError
	switch {
	case err == nil:
		return schema.Response{}
	case errors.As(err, &oe):
		return schema.Response{Code: oe.code, Error: oe.msg}
	case errors.Is(context.Cause(o.ctx), errTimeout):
		return schema.Response{Code: schema.CodeTimeout, Error: fmt.Sprintf("no word from the hub for %s: request %s given up", o.s.o.Lease, o.req.ID)}
	case o.ctx.Err() != nil:
		return schema.Response{Code: schema.CodeInternal, Error: fmt.Sprintf("request %s cancelled", o.req.ID)}
	default:
		return schema.Response{Code: schema.CodeInternal, Error: err.Error()}
	}
}

// sendDone publishes the Done response: retried for a while after a
// cancel by the hub (it waits for it), once and briefly when the lease
// expired or the agent stops.
func (o *op) sendDone(r *schema.Response) {
	base := context.WithoutCancel(o.ctx)
	limit := o.s.o.Lease
	if errors.Is(context.Cause(o.ctx), errTimeout) || o.s.stopping() {
		limit = time.Second
	}
	ctx, cancel := context.WithTimeout(base, limit)
	defer cancel()
	if o.s.stopping() {
		// The agent stops: one attempt, and never past its shutdown.
		o.sendMu.Lock()
		o.seq++
		r.ID, r.Seq = o.req.ID, o.seq
		o.sendMu.Unlock()
		_ = o.s.o.Publisher.Publish(ctx, o.s.topic, false, o.s.encode(r))
		return
	}
	if err := o.send(ctx, r, false); err != nil {
		o.s.log.Debug("done response not sent", "id", o.req.ID, "err", err)
	}
}

// stopping reports whether Run's context is done.
func (s *Server) stopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctx == nil || s.ctx.Err() != nil
}

// send publishes r with the next Seq. A data response first waits for
// room in the window. A failed publish is retried with backoff until ctx
// ends.
func (o *op) send(ctx context.Context, r *schema.Response, data bool) error {
	o.sendMu.Lock()
	defer o.sendMu.Unlock()
	seq := o.seq + 1
	if data {
		for {
			o.mu.Lock()
			room := seq-o.acked <= o.window
			o.mu.Unlock()
			if room {
				break
			}
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-o.ackWake:
			}
		}
	}
	o.seq = seq
	r.ID, r.Seq = o.req.ID, seq
	payload := o.s.encode(r)
	delay := o.s.o.RetryInitial
	for {
		pctx, cancel := context.WithTimeout(ctx, o.s.o.PublishTimeout)
		err := o.s.o.Publisher.Publish(pctx, o.s.topic, false, payload)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		o.s.log.Debug("publish response failed; retrying", "id", o.req.ID, "seq", seq, "err", err, "in", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
		delay = min(2*delay, o.s.o.RetryMax)
	}
}

// streamWriter sends what is written to it as data responses of one
// stream, in chunks of at most MaxChunkBytes. It is safe for concurrent
// use (exec's stdout and stderr).
type streamWriter struct {
	o      *op
	stream string
}

func (w streamWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		c := p[:min(len(p), schema.MaxChunkBytes)]
		if err := w.o.send(w.o.ctx, &schema.Response{Stream: w.stream, Data: bytes.Clone(c)}, true); err != nil {
			return n, err
		}
		n += len(c)
		p = p[len(c):]
	}
	return n, nil
}

// stdinQueue holds exec input until the process reads it. Requests with
// a Seq (schema.Request.Seq) are put back in order; without one they
// are taken as they come.
type stdinQueue struct {
	chunks  [][]byte
	bytes   int
	eof     bool
	next    int64             // the Seq expected next (from 1)
	pending map[int64]stdinIn // arrived ahead of next
}

type stdinIn struct {
	data []byte
	eof  bool
}

// maxStdinBytes bounds the input held for a process that does not read.
const maxStdinBytes = 1 << 20

func (q *stdinQueue) add(r *schema.Request) bool {
	if q.eof {
		return true
	}
	if r.Seq <= 0 {
		return q.push(r.Data, r.EOF)
	}
	if q.next == 0 {
		q.next = 1
	}
	if r.Seq < q.next {
		return true // a repeat
	}
	if q.pending == nil {
		q.pending = map[int64]stdinIn{}
	}
	if len(q.pending) > 256 {
		return false
	}
	q.pending[r.Seq] = stdinIn{r.Data, r.EOF}
	ok := true
	for {
		in, found := q.pending[q.next]
		if !found {
			break
		}
		delete(q.pending, q.next)
		q.next++
		ok = q.push(in.data, in.eof) && ok
	}
	return ok
}

func (q *stdinQueue) push(data []byte, eof bool) bool {
	ok := true
	if len(data) > 0 {
		if q.bytes+len(data) > maxStdinBytes {
			ok = false
		} else {
			q.chunks = append(q.chunks, data)
			q.bytes += len(data)
		}
	}
	if eof {
		q.eof = true
	}
	return ok
}

// stdinReader is the process's input: what op stdin requests bring.
type stdinReader struct{ o *op }

func (r stdinReader) Read(p []byte) (int, error) {
	o := r.o
	for {
		o.mu.Lock()
		q := &o.stdin
		if len(q.chunks) > 0 {
			n := copy(p, q.chunks[0])
			if n == len(q.chunks[0]) {
				q.chunks[0] = nil
				q.chunks = q.chunks[1:]
			} else {
				q.chunks[0] = q.chunks[0][n:]
			}
			q.bytes -= n
			o.mu.Unlock()
			return n, nil
		}
		eof := q.eof
		o.mu.Unlock()
		if eof {
			return 0, errEOF
		}
		select {
		case <-o.ctx.Done():
			return 0, errEOF
		case <-o.stdinWake:
		}
	}
}
