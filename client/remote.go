package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// podPath is /v1/devices/{device}/pods/{pod}/{what}.
func podPath(device, pod, what string) string {
	return objectPath(Devices, device) + "/pods/" + url.PathEscape(pod) + "/" + what
}

func checkPod(device, pod string) error {
	if err := schema.ValidateName(device); err != nil {
		return fmt.Errorf("device name %w", err)
	}
	if err := schema.ValidateName(pod); err != nil {
		return fmt.Errorf("pod name %w", err)
	}
	return nil
}

// StreamError is an error the hub reported after a stream's body had
// started (the Fleet-Error trailer of a log stream).
type StreamError struct {
	// Message is the hub's text, which names the device, pod and
	// container.
	Message string
}

func (e *StreamError) Error() string { return e.Message }

// LogStream is a container's log as the hub streams it. Read it to the
// end (io.EOF), then check Err, which reports an error the hub could only
// tell after the body started. Close it to stop following.
type LogStream struct {
	body    io.ReadCloser
	resp    *http.Response
	cancel  context.CancelFunc
	source  string
	warning string

	mu  sync.Mutex
	eof bool
}

// Logs opens the log of a container of pod on device (o.Pod is set from
// pod). With o.Follow the stream lasts until ctx is done or Close is
// called; the client's timeout (WithTimeout) bounds only the wait for the
// hub's answer, not the stream. Errors before the first byte are
// *APIError: NotFound (device, pod or container), ServiceUnavailable (the
// device is offline and the hub kept no crash report), GatewayTimeout
// (the device did not answer), TooManyRequests (the device is busy).
func (c *Client) Logs(ctx context.Context, device, pod string, o schema.LogOptions) (*LogStream, error) {
	if err := checkPod(device, pod); err != nil {
		return nil, err
	}
	q := url.Values{}
	if o.Container != "" {
		q.Set("container", o.Container)
	}
	if o.TailLines != nil {
		if *o.TailLines < 0 {
			return nil, fmt.Errorf("logs of %s/%s: tailLines %d is negative", device, pod, *o.TailLines)
		}
		q.Set("tailLines", strconv.FormatInt(*o.TailLines, 10))
	}
	if o.SinceSeconds < 0 || o.LimitBytes < 0 {
		return nil, fmt.Errorf("logs of %s/%s: sinceSeconds and limitBytes must not be negative", device, pod)
	}
	if o.SinceSeconds > 0 {
		q.Set("sinceSeconds", strconv.FormatInt(o.SinceSeconds, 10))
	}
	if o.LimitBytes > 0 {
		q.Set("limitBytes", strconv.FormatInt(o.LimitBytes, 10))
	}
	for k, v := range map[string]bool{"timestamps": o.Timestamps, "follow": o.Follow, "previous": o.Previous} {
		if v {
			q.Set(k, "true")
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stop := c.headerDeadline(cancel)
	resp, err := c.request(ctx, http.MethodGet, podPath(device, pod, "log"), q, nil, "")
	stop()
	if err != nil {
		err = timeoutCause(ctx, err)
		cancel(nil)
		return nil, err
	}
	return &LogStream{
		body:    resp.Body,
		resp:    resp,
		cancel:  func() { cancel(nil) },
		source:  resp.Header.Get(schema.HeaderLogSource),
		warning: resp.Header.Get(schema.HeaderWarning),
	}, nil
}

// errHeaderTimeout is the cause of a stream's context cancelled because
// the hub did not answer within the client's timeout.
var errHeaderTimeout = fmt.Errorf("no answer from the hub: %w", context.DeadlineExceeded)

// headerDeadline cancels a stream's context if the hub has not answered
// within the client's timeout; the returned func stops the timer once it
// has.
func (c *Client) headerDeadline(cancel context.CancelCauseFunc) (stop func()) {
	if c.timeout <= 0 {
		return func() {}
	}
	t := time.AfterFunc(c.timeout, func() { cancel(errHeaderTimeout) })
	return func() { t.Stop() }
}

// timeoutCause makes an error of a request whose context the header
// deadline cancelled say so (errors.Is context.DeadlineExceeded).
func timeoutCause(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), errHeaderTimeout) {
		return fmt.Errorf("%w (%v)", errHeaderTimeout, err)
	}
	return err
}

// Read reads the log. It returns io.EOF at the end of the stream (then see
// Err) and the context's error once the stream is cancelled.
func (s *LogStream) Read(p []byte) (int, error) {
	n, err := s.body.Read(p)
	if errors.Is(err, io.EOF) {
		s.mu.Lock()
		s.eof = true
		s.mu.Unlock()
	}
	return n, err
}

// Close stops the stream (the hub then cancels it on the device).
func (s *LogStream) Close() error {
	s.cancel()
	return s.body.Close()
}

// Source is where the lines come from: schema.LogSourceDevice or
// schema.LogSourceCrashReport ("" from a hub that does not say).
func (s *LogStream) Source() string { return s.source }

// Warning is the hub's Fleet-Warning header, "" if none.
func (s *LogStream) Warning() string { return s.warning }

// Err returns the *StreamError the hub sent in its Fleet-Error trailer, or
// nil. It is known only once Read has returned io.EOF.
func (s *LogStream) Err() error {
	s.mu.Lock()
	eof := s.eof
	s.mu.Unlock()
	if !eof {
		return nil
	}
	if msg := s.resp.Trailer.Get(schema.TrailerError); msg != "" {
		return &StreamError{Message: msg}
	}
	return nil
}

// ExecFrame is one frame an exec stream received: Type is
// schema.FrameStdout, FrameStderr or FrameExit.
type ExecFrame struct {
	Type byte
	Data []byte
}

// ExecStream is a command running in a container, through the hub. Send
// input with Stdin, CloseStdin and Resize (safe to call from any
// goroutine); receive its output with Recv from one goroutine until it
// returns io.EOF, then read Exit. Close cancels the command.
type ExecStream struct {
	conn net.Conn
	br   *bufio.Reader
	stop func() bool

	wmu sync.Mutex // serialises frames written
	buf []byte
	// exit is set by Recv on the FrameExit frame.
	exit *schema.ExecExit
}

// Exec runs o.Command in a container of pod on device (o.Pod is set from
// pod). The client dials the hub with the same transport settings (TLS
// config, dialer) as its other requests, asks to upgrade the connection
// to schema.ExecUpgradeProtocol and, on 101 Switching Protocols, returns
// the stream. Any other answer is an *APIError: BadRequest, NotFound,
// Conflict (the container does not run), TooManyRequests,
// ServiceUnavailable (offline), GatewayTimeout (no answer). The client's
// timeout bounds the wait for that answer only. Cancelling ctx cancels
// the command.
func (c *Client) Exec(ctx context.Context, device, pod string, o schema.ExecOptions) (*ExecStream, error) {
	if err := checkPod(device, pod); err != nil {
		return nil, err
	}
	if len(o.Command) == 0 || o.Command[0] == "" {
		return nil, fmt.Errorf("exec in %s/%s: command: required", device, pod)
	}
	q := url.Values{}
	if o.Container != "" {
		q.Set("container", o.Container)
	}
	q["command"] = o.Command
	if o.TTY {
		q.Set("tty", "true")
	}
	if o.Stdin {
		q.Set("stdin", "true")
	}
	if o.Size != nil {
		q.Set("cols", strconv.Itoa(int(o.Size.Cols)))
		q.Set("rows", strconv.Itoa(int(o.Size.Rows)))
	}
	p := podPath(device, pod, "exec")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url(p, q), nil)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", p, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", schema.ExecUpgradeProtocol)

	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopTimer := c.headerDeadline(cancel)
	defer stopTimer()
	conn, err := c.dialHub(hctx)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", c.base.Redacted()+p, timeoutCause(hctx, err))
	}
	// Until the hub has answered, the header context closes the
	// connection; after, ctx does (cancelling the command).
	stopHeader := context.AfterFunc(hctx, func() { conn.Close() })
	br := bufio.NewReader(conn)
	resp, err := c.upgrade(conn, br, req)
	if !stopHeader() || err != nil {
		conn.Close()
		if err == nil {
			err = context.Cause(hctx)
		}
		return nil, fmt.Errorf("POST %s: %w", c.base.Redacted()+p, timeoutCause(hctx, err))
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		return nil, decodeError(resp)
	}
	return &ExecStream{conn: conn, br: br, stop: context.AfterFunc(ctx, func() { conn.Close() })}, nil
}

// upgrade writes the request and reads the answer's header.
func (c *Client) upgrade(conn net.Conn, br *bufio.Reader, req *http.Request) (*http.Response, error) {
	if err := req.Write(conn); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		// decodeError reads the body: bound it, since the connection
		// stays open.
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.LimitReader(resp.Body, 1<<20), resp.Body}
		return resp, nil
	}
	if resp.Header.Get("Upgrade") != schema.ExecUpgradeProtocol {
		return nil, fmt.Errorf("the hub switched to protocol %q, want %q", resp.Header.Get("Upgrade"), schema.ExecUpgradeProtocol)
	}
	return resp, nil
}

// dialHub opens a connection to the hub as the client's transport would:
// its dialer and, for https, its TLS config (HTTP/1.1 only, since an
// upgrade needs it). A transport that is not an *http.Transport gives the
// defaults. Proxies are not used.
func (c *Client) dialHub(ctx context.Context) (net.Conn, error) {
	tr, _ := c.http.Transport.(*http.Transport)
	if tr == nil {
		tr, _ = http.DefaultTransport.(*http.Transport)
	}
	if tr == nil {
		tr = &http.Transport{}
	}
	host, port := c.base.Hostname(), c.base.Port()
	if port == "" {
		port = "80"
		if c.base.Scheme == "https" {
			port = "443"
		}
	}
	addr := net.JoinHostPort(host, port)
	if c.base.Scheme == "https" && tr.DialTLSContext != nil {
		return tr.DialTLSContext(ctx, "tcp", addr)
	}
	dial := tr.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	conn, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if c.base.Scheme != "https" {
		return conn, nil
	}
	cfg := &tls.Config{}
	if tr.TLSClientConfig != nil {
		cfg = tr.TLSClientConfig.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	cfg.NextProtos = []string{"http/1.1"}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return tc, nil
}

// Recv returns the next output frame (FrameStdout, FrameStderr) or the
// FrameExit frame, whose ExecExit Exit returns after. It returns io.EOF
// after FrameExit, and an error when the connection ends before it. Data
// is valid until the next call.
func (s *ExecStream) Recv() (ExecFrame, error) {
	if s.exit != nil {
		return ExecFrame{}, io.EOF
	}
	for {
		typ, data, err := schema.ReadFrame(s.br, s.buf)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return ExecFrame{}, errors.New("exec: the connection to the hub ended before the command's exit status")
			}
			return ExecFrame{}, fmt.Errorf("exec: %w", err)
		}
		if cap(data) > cap(s.buf) {
			s.buf = data[:0]
		}
		switch typ {
		case schema.FrameStdout, schema.FrameStderr:
			return ExecFrame{Type: typ, Data: data}, nil
		case schema.FrameExit:
			var x schema.ExecExit
			if err := json.Unmarshal(data, &x); err != nil {
				return ExecFrame{}, fmt.Errorf("exec: exit frame: %w", err)
			}
			s.exit = &x
			return ExecFrame{Type: typ, Data: data}, nil
		}
		// Unknown frame types are for later versions: skip them.
	}
}

// Exit is the command's end, once Recv has returned the FrameExit frame;
// nil before.
func (s *ExecStream) Exit() *schema.ExecExit { return s.exit }

// Copy writes the command's output to stdout and stderr until it exits
// and returns how it ended. An ExecExit with Error set means the command
// could not run or was cut short (Code says why).
func (s *ExecStream) Copy(stdout, stderr io.Writer) (*schema.ExecExit, error) {
	for {
		f, err := s.Recv()
		if err != nil {
			return nil, err
		}
		switch f.Type {
		case schema.FrameStdout:
			if _, err := stdout.Write(f.Data); err != nil {
				return nil, fmt.Errorf("exec: write output: %w", err)
			}
		case schema.FrameStderr:
			if _, err := stderr.Write(f.Data); err != nil {
				return nil, fmt.Errorf("exec: write error output: %w", err)
			}
		case schema.FrameExit:
			return s.exit, nil
		}
	}
}

func (s *ExecStream) write(typ byte, payload []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return schema.WriteFrame(s.conn, typ, payload)
}

// Stdin sends input to the command, in frames of at most
// schema.MaxFrameBytes.
func (s *ExecStream) Stdin(p []byte) error {
	for len(p) > 0 {
		n := min(len(p), schema.MaxFrameBytes)
		if err := s.write(schema.FrameStdin, p[:n]); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// CloseStdin closes the command's input.
func (s *ExecStream) CloseStdin() error { return s.write(schema.FrameStdinEOF, nil) }

// Resize tells the command's terminal its new size.
func (s *ExecStream) Resize(size schema.TermSize) error {
	b, err := json.Marshal(size)
	if err != nil {
		return fmt.Errorf("exec: resize: %w", err)
	}
	return s.write(schema.FrameResize, b)
}

// Close ends the stream; a command still running is cancelled.
func (s *ExecStream) Close() error {
	s.stop()
	return s.conn.Close()
}

// Top measures a device now (the hub asks it, 5 s deadline), or returns
// the last report the hub has with Stale set when the device does not
// answer. It is ServiceUnavailable when the hub has none.
func (c *Client) Top(ctx context.Context, device string) (*schema.TopReport, error) {
	if err := checkName(Devices, device); err != nil {
		return nil, err
	}
	var out schema.TopReport
	if err := c.do(ctx, http.MethodGet, objectPath(Devices, device)+"/top", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// TopList measures every device selector selects ("" for all) at once:
// fresh reports from the devices that answer, stale ones for the others,
// none for devices never measured; sorted by device name.
func (c *Client) TopList(ctx context.Context, selector string) ([]schema.TopReport, error) {
	var l schema.TopReportList
	if err := c.do(ctx, http.MethodGet, "/v1/top", selectorQuery(selector), nil, &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// CrashReports returns the latest crash report of each container of a
// device the hub has one for, newest first. A monitor credential may not
// read them (IsForbidden).
func (c *Client) CrashReports(ctx context.Context, device string) ([]schema.CrashReport, error) {
	if err := checkName(Devices, device); err != nil {
		return nil, err
	}
	var l schema.CrashReportList
	if err := c.do(ctx, http.MethodGet, objectPath(Devices, device)+"/crashreports", nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}
