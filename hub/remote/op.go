package remote

import (
	"fmt"
	"sync"

	"github.com/fleetmq/fleet/schema"
)

// Reasons a response is dropped (fleet_remote_responses_dropped_total).
const (
	dropMalformed = "malformed"
	dropTooLarge  = "too_large"
	dropUnknownID = "unknown_id"
	dropMismatch  = "device_mismatch"
	dropDuplicate = "duplicate"
	dropWindow    = "window"
	dropLate      = "late"
	// dropForgedRefused: the device refused, as unauthenticated, a
	// request the hub did not send.
	dropForgedRefused = "forged_request_refused"
)

// op is one open request to a device: the responses received and not yet
// taken by the HTTP side, and the flow-control bookkeeping.
type op struct {
	id, device, kind string
	window           int
	stream           bool

	wake chan struct{} // a response arrived, or the op failed
	kick chan struct{} // the device came back online: ack at once

	mu      sync.Mutex
	queue   []*schema.Response // received, not yet taken, Seq order
	lastSeq int64              // highest Seq received
	// dataSeqs are the Seqs of the data responses received above acked:
	// what the device counts against its window.
	dataSeqs []int64
	acked    int64 // the last Ack sent
	taken    int64 // the highest Seq taken by the HTTP side
	sinceAck int   // data responses taken since the last ack
	done     bool  // a Done response was received
	peak     int   // the most responses queued at once
	err      error // the hub cut the device off
}

func newOp(id, device, kind string, window int, stream bool) *op {
	return &op{
		id: id, device: device, kind: kind, window: window, stream: stream,
		wake: make(chan struct{}, 1), kick: make(chan struct{}, 1),
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// receive queues a response from the op's device. It returns the reason
// it was dropped, "" if kept. It never blocks.
func (o *op) receive(r *schema.Response) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case o.done || o.err != nil:
		return dropLate
	case r.Seq <= o.lastSeq:
		return dropDuplicate
	}
	if !r.Done {
		if len(r.Data) > 0 {
			if len(o.dataSeqs) >= o.window {
				o.cutOff(fmt.Errorf("device %s sent more than its window of %d unacknowledged responses: stream cut off", o.device, o.window))
				return dropWindow
			}
			o.dataSeqs = append(o.dataSeqs, r.Seq)
		} else if len(o.queue) > o.window {
			// Empty responses are not the device's to send in bulk either.
			o.cutOff(fmt.Errorf("device %s sent more than %d responses without data: stream cut off", o.device, o.window))
			return dropWindow
		}
	}
	o.lastSeq = r.Seq
	o.done = r.Done
	o.queue = append(o.queue, r)
	o.peak = max(o.peak, len(o.queue))
	signal(o.wake)
	return ""
}

// cutOff fails the op and frees what it holds.
func (o *op) cutOff(err error) {
	o.err = err
	o.queue = nil
	o.dataSeqs = nil
	signal(o.wake)
}

// peek returns the next response without taking it, or the op's error.
func (o *op) peek() (*schema.Response, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return nil, o.err
	}
	if len(o.queue) == 0 {
		return nil, nil
	}
	return o.queue[0], nil
}

// take removes and returns the next response (nil if none), or the op's
// error.
func (o *op) take() (*schema.Response, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return nil, o.err
	}
	if len(o.queue) == 0 {
		return nil, nil
	}
	r := o.queue[0]
	o.queue[0] = nil
	o.queue = o.queue[1:]
	o.taken = r.Seq
	if len(r.Data) > 0 {
		o.sinceAck++
	}
	return r, nil
}

// ackDue returns the Ack to send now: when half the window was taken
// since the last one (coalescing), or always when force is set (the
// keepalive, a reconnected device). ok is false when there is nothing to
// send.
func (o *op) ackDue(force bool) (ack int64, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done || o.err != nil {
		return 0, false
	}
	if !force && o.sinceAck < max(1, o.window/2) {
		return 0, false
	}
	return o.taken, true
}

// acked records that ack was sent: the data responses up to it no longer
// count against the window.
func (o *op) ackSent(ack int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ack < o.acked {
		return
	}
	o.acked = ack
	o.sinceAck = 0
	i := 0
	for i < len(o.dataSeqs) && o.dataSeqs[i] <= ack {
		i++
	}
	o.dataSeqs = o.dataSeqs[i:]
}

// peakQueued returns the most responses the op held at once.
func (o *op) peakQueued() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.peak
}

// finished reports whether the device ended the op (Done received):
// then no cancel is needed.
func (o *op) finished() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.done
}
