package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Requests to devices: logs, exec and live metrics travel over MQTT as
// request/response, so that they reach a device behind any NAT through
// the session it already keeps.
//
//	{prefix}/devices/{device}/requests   hub → device, QoS 1, not retained
//	{prefix}/devices/{device}/responses  device → hub, QoS 1, not retained
//
// Only the hub may publish requests; only the device may read its own
// requests topic and publish on its own responses topic (broker.Allowed).
// The monitor role sees neither.
//
// One operation is one request ID (RequestIDBytes random bytes in hex,
// chosen by the hub). The hub sends a Request with Op logs, exec or top;
// then, for streams, further Requests with the same ID: ack (flow
// control), stdin, resize and cancel. The device answers with Responses
// carrying the same ID and a sequence number Seq counting from 1; the
// last one has Done set (with ExitCode for exec, or Error).
//
// Flow control is credit-based: the device may have at most
// Request.Window (default DefaultRequestWindow) responses with data that
// the hub has not acknowledged (Seq > the last Ack); each carries at most
// MaxChunkBytes of data. The hub acknowledges what it has passed on to
// its client, so a slow reader (a CLI on a bad link) stops the device
// instead of filling the hub's memory or the broker's queues. The hub
// repeats its last ack every RequestKeepalive while a stream is open,
// which also tells the device that somebody still reads: a stream that
// hears nothing for RequestLease is cancelled by the device. The device
// resends nothing; a publish that fails while it is disconnected is
// retried, so responses may arrive twice and the hub drops any Seq it
// has seen.
//
// A request past its Deadline is dropped by the device without answer.
//
// Authentication (requestsig.go). The broker's ACL is not what protects a
// device: whoever can publish on its requests topic (a compromised
// external broker, an account with the hub's rights) could otherwise run
// anything in its containers. So the hub signs EVERY request it sends,
// the follow-ups of a stream (ack, stdin, resize, cancel) included, each
// with its own nonce and expiry, and a device acts on none it cannot
// verify with the hub key it pinned. Follow-ups are signed each rather
// than bound to the opening request through the request ID: the ID
// travels in clear through the broker, which is the party not trusted,
// and no secret is shared between hub and device that the broker could
// not read. A signed follow-up names its request ID inside the signed
// bytes, so it steers only that operation, and its nonce makes it
// single-use. A request refused (unsigned, bad signature, no key pinned,
// expired, expiring too far ahead, replayed, for another device) runs
// nothing: an opening request (logs, exec, top) whose ID is no live
// operation is answered with one Done response, Code
// CodeUnauthenticated, saying why; a refused follow-up is dropped
// without answer (an answer would end the hub's live stream of that ID).

// Topic kinds for requests to devices.
const (
	TopicRequests  = "requests"
	TopicResponses = "responses"
)

// Kinds of the request/response payloads.
const (
	KindRequest  = "Request"
	KindResponse = "Response"
)

// Request operations.
const (
	OpLogs   = "logs"   // read or follow a container's log
	OpExec   = "exec"   // run a command in a running container
	OpTop    = "top"    // measure the device and its containers now
	OpAck    = "ack"    // flow control: every Seq ≤ Ack was consumed
	OpStdin  = "stdin"  // exec input (Data; EOF closes it)
	OpResize = "resize" // exec terminal size (Size)
	OpCancel = "cancel" // stop the operation; the device answers Done
)

// Limits and timings of the request protocol.
const (
	// RequestIDBytes is the number of random bytes in a request ID.
	RequestIDBytes = 16
	// MaxChunkBytes bounds Response.Data and Request.Data.
	MaxChunkBytes = 16 << 10
	// DefaultRequestWindow is the number of unacknowledged data responses
	// a device may have in flight for one request.
	DefaultRequestWindow = 8
	// MaxRequestWindow bounds Request.Window.
	MaxRequestWindow = 64
	// RequestKeepalive is how often the hub repeats its ack on an open
	// stream.
	RequestKeepalive = 10 * time.Second
	// RequestLease is how long a device keeps a stream open without
	// hearing from the hub.
	RequestLease = 45 * time.Second
	// MaxConcurrentRequests bounds the operations a device runs at once;
	// it refuses more with CodeTooManyRequests.
	MaxConcurrentRequests = 8
	// MaxCrashLogBytes and MaxCrashLogLines bound CrashReport.LogTail.
	MaxCrashLogBytes = 8 << 10
	MaxCrashLogLines = 50
)

// Request is a message from the hub to one device.
type Request struct {
	TypeMeta `json:",inline"`
	// ID names the operation: RequestIDBytes random bytes, lower-case hex.
	ID string `json:"id"`
	// Device is the device the request is for; a device ignores requests
	// for another.
	Device string `json:"device"`
	// Op is one of the Op constants.
	Op string `json:"op"`
	// Deadline: a device drops a logs, exec or top request it receives
	// after this time. Zero means no deadline.
	Deadline time.Time `json:"deadline,omitzero"`
	// Window is the flow-control window of a stream (logs, exec); 0 means
	// DefaultRequestWindow.
	Window int `json:"window,omitempty"`
	// Logs are the options of a logs request.
	Logs *LogOptions `json:"logs,omitempty"`
	// Exec are the options of an exec request.
	Exec *ExecOptions `json:"exec,omitempty"`
	// Ack (op ack) is the highest Seq the hub has consumed.
	Ack int64 `json:"ack,omitempty"`
	// Data (op stdin) is input for the process, at most MaxChunkBytes.
	Data []byte `json:"data,omitempty"`
	// EOF (op stdin) closes the process's input after Data.
	EOF bool `json:"eof,omitempty"`
	// Seq (op stdin) counts the stdin requests of one operation from 1:
	// MQTT handlers may see requests out of order, and the device puts
	// input back in this order. 0: taken as it comes.
	Seq int64 `json:"seq,omitempty"`
	// Size (op resize) is the new terminal size.
	Size *TermSize `json:"size,omitempty"`
	// RequestAuth (nonce, expires) makes the request single-use and
	// short-lived; with the rest, it is under the hub's signature
	// (requestsig.go).
	RequestAuth `json:",inline"`
}

// LogOptions select what a logs request returns, as kubectl logs does.
type LogOptions struct {
	// Pod and Container name the container; Container may be empty when
	// the pod has one container.
	// Pod is the pod to read, named after its Deployment.
	Pod string `json:"pod"`
	// Container is the container whose log to read; it may be empty when
	// the pod has one container.
	Container string `json:"container,omitempty"`
	// TailLines returns only the last N lines (nil: all).
	TailLines *int64 `json:"tailLines,omitempty"`
	// SinceSeconds returns only lines written in the last N seconds.
	SinceSeconds int64 `json:"sinceSeconds,omitempty"`
	// Timestamps prefixes each line with its time (RFC 3339, nanoseconds).
	Timestamps bool `json:"timestamps,omitempty"`
	// Follow keeps the stream open and sends new lines as they come.
	Follow bool `json:"follow,omitempty"`
	// Previous returns the log of the container's previous run.
	Previous bool `json:"previous,omitempty"`
	// LimitBytes stops after this many bytes (0: no limit).
	LimitBytes int64 `json:"limitBytes,omitempty"`
}

// ExecOptions describe a command run in a container.
type ExecOptions struct {
	// Pod is the pod to run the command in.
	Pod string `json:"pod"`
	// Container is the container to run it in; it may be empty when the
	// pod has one container.
	Container string `json:"container,omitempty"`
	// Command is the program and its arguments (no shell unless given).
	Command []string `json:"command"`
	// TTY runs the command with a terminal (stdout and stderr merged).
	TTY bool `json:"tty,omitempty"`
	// Stdin attaches the process's input to op stdin requests.
	Stdin bool `json:"stdin,omitempty"`
	// Size is the initial terminal size (TTY only).
	Size *TermSize `json:"size,omitempty"`
}

// TermSize is a terminal's size in characters.
type TermSize struct {
	// Cols is the width in characters.
	Cols uint16 `json:"cols"`
	// Rows is the height in lines.
	Rows uint16 `json:"rows"`
}

// Response streams.
const (
	StreamStdout = "stdout" // exec output (and a TTY's)
	StreamStderr = "stderr" // exec error output
	StreamLog    = "log"    // log lines
)

// Error codes of a failed request (Response.Code).
const (
	CodeBadRequest      = "BadRequest"      // malformed or impossible request
	CodeNotFound        = "NotFound"        // no such pod, container or log
	CodeNotRunning      = "NotRunning"      // exec on a container that does not run
	CodeTooManyRequests = "TooManyRequests" // the device runs MaxConcurrentRequests already
	CodeTimeout         = "Timeout"         // the device gave up (lease expired)
	CodeUnavailable     = "Unavailable"     // the device cannot do it (no runtime, no exec)
	CodeInternal        = "Internal"        // anything else
	// CodeUnauthenticated (requestsig.go): the device could not
	// authenticate the request and did nothing.
)

// Response is a message from a device answering a Request.
type Response struct {
	TypeMeta `json:",inline"`
	// ID is the ID of the request answered.
	ID string `json:"id"`
	// Device is the device that answers; it must be the one the request
	// went to, and the one whose responses topic it came on.
	Device string `json:"device"`
	// Seq counts the responses to one request from 1.
	Seq int64 `json:"seq"`
	// Stream is the stream Data belongs to (Stream constants).
	Stream string `json:"stream,omitempty"`
	// Data is at most MaxChunkBytes of output.
	Data []byte `json:"data,omitempty"`
	// Top is the answer to a top request.
	Top *TopReport `json:"top,omitempty"`
	// Done ends the operation; nothing follows it.
	Done bool `json:"done,omitempty"`
	// ExitCode is the exit code of an exec'd command (with Done).
	ExitCode *int `json:"exitCode,omitempty"`
	// Code says why the operation failed, for programs (with Done; the
	// Code constants).
	Code string `json:"code,omitempty"`
	// Error says why the operation failed, for people (with Done).
	Error string `json:"error,omitempty"`
}

// TopReport is one measurement of a device and its containers.
type TopReport struct {
	TypeMeta `json:",inline"`
	// Device is the device measured.
	Device string `json:"device"`
	// Time is when the device measured, an RFC 3339 time.
	Time time.Time `json:"time"`
	// Node describes the device as a whole.
	Node NodeMetrics `json:"node"`
	// Containers are the managed containers that run.
	Containers []ContainerMetrics `json:"containers,omitempty"`
	// Stale is set by the hub on a report it answers from memory because
	// the device did not answer (offline, or too slow).
	Stale bool `json:"stale,omitempty"`
}

// NodeMetrics are a device's figures. A figure the device cannot read
// is left out.
type NodeMetrics struct {
	// Load1 is the load average over 1 minute (/proc/loadavg).
	Load1 float64 `json:"load1"`
	// Load5 is the load average over 5 minutes.
	Load5 float64 `json:"load5"`
	// Load15 is the load average over 15 minutes.
	Load15 float64 `json:"load15"`
	// CPUs is the number of CPUs online.
	CPUs int `json:"cpus,omitempty"`
	// MemoryTotalBytes is the device's memory (/proc/meminfo MemTotal).
	MemoryTotalBytes uint64 `json:"memoryTotalBytes,omitempty"`
	// MemoryAvailableBytes is the memory available to new processes
	// (MemAvailable).
	MemoryAvailableBytes uint64 `json:"memoryAvailableBytes,omitempty"`
	// StateDisk is the file system of the agent's state directory.
	StateDisk *DiskMetrics `json:"stateDisk,omitempty"`
	// ImageDisk is the file system of the runtime's images.
	ImageDisk *DiskMetrics `json:"imageDisk,omitempty"`
	// UptimeSeconds is how long the device has been up.
	UptimeSeconds int64 `json:"uptimeSeconds,omitempty"`
	// TemperatureCelsius is the SoC's temperature
	// (/sys/class/thermal/thermal_zone0), nil where there is none.
	TemperatureCelsius *float64 `json:"temperatureCelsius,omitempty"`
	// Throttled is a Raspberry Pi's `vcgencmd get_throttled` value
	// ("0x0": never throttled), empty elsewhere.
	Throttled string `json:"throttled,omitempty"`
	// ThrottledFlags names the bits set in Throttled: under-voltage,
	// arm-frequency-capped, throttled and soft-temp-limit, each with
	// "-now" or "-occurred".
	ThrottledFlags []string `json:"throttledFlags,omitempty"`
}

// DiskMetrics describe one file system.
type DiskMetrics struct {
	// Path is the directory measured.
	Path string `json:"path"`
	// TotalBytes is the file system's size.
	TotalBytes uint64 `json:"totalBytes"`
	// FreeBytes is the space unprivileged writers may still use.
	FreeBytes uint64 `json:"freeBytes"`
}

// ContainerMetrics are one running container's figures, from its cgroup.
type ContainerMetrics struct {
	// Pod is the container's pod.
	Pod string `json:"pod"`
	// Container is the container's name in its pod.
	Container string `json:"container"`
	// CPUUsageNanos is the CPU time used since the container started.
	CPUUsageNanos uint64 `json:"cpuUsageNanos"`
	// CPUMillicores is the CPU rate over the interval since the device
	// last measured (nil on the first measurement).
	CPUMillicores *int64 `json:"cpuMillicores,omitempty"`
	// MemoryBytes is the memory in use (cgroup memory.current or
	// memory.usage_in_bytes).
	MemoryBytes uint64 `json:"memoryBytes"`
	// MemoryWorkingSetBytes is MemoryBytes minus inactive file pages, what
	// kubectl top shows.
	MemoryWorkingSetBytes uint64 `json:"memoryWorkingSetBytes"`
	// MemoryLimitBytes is the container's memory limit (0: none).
	MemoryLimitBytes uint64 `json:"memoryLimitBytes,omitempty"`
	// PIDs is the number of processes.
	PIDs uint64 `json:"pids,omitempty"`
}

// CrashReport is what the hub keeps of a container's last crash: the
// event that reported it and the last lines of its log. A device
// publishes it (QoS 1, not retained) on its crashreports topic, which
// only the hub may read, before the event that points at it
// (Event.CrashReport).
type CrashReport struct {
	// Device is the device the container ran on.
	Device string `json:"device"`
	// Pod is the container's pod.
	Pod string `json:"pod"`
	// Container is the container that crashed.
	Container string `json:"container"`
	// Time is when the device recorded the crash.
	Time time.Time `json:"time"`
	// Reason is the event's reason (Exited, BackOff).
	Reason string `json:"reason"`
	// Message is the event's message.
	Message string `json:"message,omitempty"`
	// ExitCode is the container's exit code.
	ExitCode *int32 `json:"exitCode,omitempty"`
	// LogTail is the last lines of the container's log when it crashed
	// (at most MaxCrashLogLines lines and MaxCrashLogBytes bytes).
	LogTail string `json:"logTail"`
}

// ValidateRequestIDHex checks a request ID: RequestIDBytes bytes in
// lower-case hex.
func ValidateRequestIDHex(id string) error {
	if len(id) != 2*RequestIDBytes {
		return fmt.Errorf("id: want %d hex digits, got %d characters", 2*RequestIDBytes, len(id))
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("id %q: want lower-case hex", id)
		}
	}
	return nil
}

// DecodeRequest decodes and checks a request payload. It never panics.
func DecodeRequest(payload []byte) (*Request, error) {
	var r Request
	if err := json.Unmarshal(payload, &r); err != nil { // unknown fields pass: additions stay compatible
		return nil, fmt.Errorf("request: %w", err)
	}
	if r.APIVersion != APIVersion || r.Kind != KindRequest {
		return nil, fmt.Errorf("request: apiVersion/kind: want %s %s, got %q %q", APIVersion, KindRequest, r.APIVersion, r.Kind)
	}
	if err := ValidateRequestIDHex(r.ID); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	if err := ValidateName(r.Device); err != nil {
		return nil, fmt.Errorf("request: device: %w", err)
	}
	if len(r.Data) > MaxChunkBytes {
		return nil, fmt.Errorf("request: data: %d bytes, at most %d", len(r.Data), MaxChunkBytes)
	}
	if r.Window < 0 || r.Window > MaxRequestWindow {
		return nil, fmt.Errorf("request: window: %d, want 0..%d", r.Window, MaxRequestWindow)
	}
	switch r.Op {
	case OpLogs:
		if r.Logs == nil {
			return nil, errors.New("request: logs: required for op logs")
		}
		if err := r.Logs.validate(); err != nil {
			return nil, fmt.Errorf("request: logs.%w", err)
		}
	case OpExec:
		if r.Exec == nil {
			return nil, errors.New("request: exec: required for op exec")
		}
		if err := r.Exec.validate(); err != nil {
			return nil, fmt.Errorf("request: exec.%w", err)
		}
	case OpResize:
		if r.Size == nil {
			return nil, errors.New("request: size: required for op resize")
		}
	case OpTop, OpAck, OpStdin, OpCancel:
	default:
		return nil, fmt.Errorf("request: op: unsupported value %q", r.Op)
	}
	if r.Seq < 0 {
		return nil, fmt.Errorf("request: seq: %d is negative", r.Seq)
	}
	if r.Ack < 0 {
		return nil, fmt.Errorf("request: ack: %d is negative", r.Ack)
	}
	return &r, nil
}

func (o *LogOptions) validate() error {
	if err := ValidateName(o.Pod); err != nil {
		return fmt.Errorf("pod: %w", err)
	}
	if o.Container != "" {
		if err := ValidateName(o.Container); err != nil {
			return fmt.Errorf("container: %w", err)
		}
	}
	if o.TailLines != nil && *o.TailLines < 0 {
		return fmt.Errorf("tailLines: %d is negative", *o.TailLines)
	}
	if o.SinceSeconds < 0 {
		return fmt.Errorf("sinceSeconds: %d is negative", o.SinceSeconds)
	}
	if o.LimitBytes < 0 {
		return fmt.Errorf("limitBytes: %d is negative", o.LimitBytes)
	}
	return nil
}

func (o *ExecOptions) validate() error {
	if err := ValidateName(o.Pod); err != nil {
		return fmt.Errorf("pod: %w", err)
	}
	if o.Container != "" {
		if err := ValidateName(o.Container); err != nil {
			return fmt.Errorf("container: %w", err)
		}
	}
	if len(o.Command) == 0 || o.Command[0] == "" {
		return errors.New("command: required")
	}
	n := 0
	for i, a := range o.Command {
		if strings.ContainsRune(a, 0) || !utf8.ValidString(a) {
			return fmt.Errorf("command[%d]: not valid text", i)
		}
		n += len(a)
	}
	if n > 64<<10 {
		return fmt.Errorf("command: %d bytes, at most 64 KiB", n)
	}
	return nil
}

// DecodeResponse decodes and checks a response payload. It never panics.
func DecodeResponse(payload []byte) (*Response, error) {
	var r Response
	if err := json.Unmarshal(payload, &r); err != nil { // unknown fields pass: additions stay compatible
		return nil, fmt.Errorf("response: %w", err)
	}
	if r.APIVersion != APIVersion || r.Kind != KindResponse {
		return nil, fmt.Errorf("response: apiVersion/kind: want %s %s, got %q %q", APIVersion, KindResponse, r.APIVersion, r.Kind)
	}
	if err := ValidateRequestIDHex(r.ID); err != nil {
		return nil, fmt.Errorf("response: %w", err)
	}
	if err := ValidateName(r.Device); err != nil {
		return nil, fmt.Errorf("response: device: %w", err)
	}
	if r.Seq < 1 {
		return nil, fmt.Errorf("response: seq: %d, want ≥ 1", r.Seq)
	}
	if len(r.Data) > MaxChunkBytes {
		return nil, fmt.Errorf("response: data: %d bytes, at most %d", len(r.Data), MaxChunkBytes)
	}
	switch r.Stream {
	case "", StreamStdout, StreamStderr, StreamLog:
	default:
		return nil, fmt.Errorf("response: stream: unsupported value %q", r.Stream)
	}
	return &r, nil
}

// The hub's HTTP answers about remote operations (hub/API.md).

// Headers and trailer of a log stream (GET /v1/devices/{device}/pods/{pod}/log).
const (
	// HeaderLogSource says where the lines come from: LogSourceDevice, or
	// LogSourceCrashReport when the hub answers from the crash report it
	// keeps because the device is offline or has no previous log.
	HeaderLogSource = "Fleet-Log-Source"
	// HeaderWarning is one line for people about the answer, such as
	// "device offline since …; showing the last lines …".
	HeaderWarning = "Fleet-Warning"
	// TrailerError is set by the hub when a log stream failed after its
	// body started.
	TrailerError = "Fleet-Error"
)

// Values of HeaderLogSource.
const (
	LogSourceDevice      = "device"
	LogSourceCrashReport = "crash-report"
)

// Kinds of the lists below.
const (
	KindTopReport       = "TopReport"
	KindTopReportList   = "TopReportList"
	KindCrashReportList = "CrashReportList"
)

// TopReportList is the answer of GET /v1/top.
type TopReportList struct {
	TypeMeta `json:",inline"`
	// Items are the reports, by device name.
	Items []TopReport `json:"items"`
}

// CrashReportList is the answer of GET /v1/devices/{device}/crashreports.
type CrashReportList struct {
	TypeMeta `json:",inline"`
	// Items are the latest crash report of each container, newest first.
	Items []CrashReport `json:"items"`
}
