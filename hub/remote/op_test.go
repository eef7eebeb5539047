package remote

import (
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func resp(seq int64, dataLen int, isDone bool) *schema.Response {
	return &schema.Response{Seq: seq, Data: []byte(strings.Repeat("x", dataLen)), Done: isDone}
}

// TestOpFlowControl: the window counts the data responses above the last
// ack sent; a device past it is cut off; duplicates and late responses are
// dropped; acks are coalesced.
func TestOpFlowControl(t *testing.T) {
	o := newOp("id", "pi-1", schema.OpExec, 4, true)
	if r := o.receive(resp(1, 0, false)); r != "" { // exec "started": no data, not counted
		t.Fatalf("started: %s", r)
	}
	for seq := int64(2); seq <= 5; seq++ {
		if r := o.receive(resp(seq, 10, false)); r != "" {
			t.Fatalf("seq %d: %s", seq, r)
		}
	}
	if r := o.receive(resp(3, 10, false)); r != dropDuplicate {
		t.Errorf("repeated seq: %q", r)
	}
	if _, ok := o.ackDue(false); ok {
		t.Error("ack due before anything was taken")
	}
	for range 3 { // started + two data
		if r, err := o.take(); r == nil || err != nil {
			t.Fatal(r, err)
		}
	}
	ack, ok := o.ackDue(false)
	if !ok || ack != 3 {
		t.Fatalf("ack %d %v, want 3 after half the window", ack, ok)
	}
	o.ackSent(ack)
	if r := o.receive(resp(6, 10, false)); r != "" { // 4, 5, 6 unacked
		t.Fatalf("seq 6: %s", r)
	}
	if r := o.receive(resp(7, 10, false)); r != "" { // 4..7: the window
		t.Fatalf("seq 7: %s", r)
	}
	if got := o.peakQueued(); got > 5 {
		t.Errorf("peak %d", got)
	}
	if r := o.receive(resp(8, 10, false)); r != dropWindow {
		t.Fatalf("seq 8 past the window: %q", r)
	}
	if _, err := o.take(); err == nil || !strings.Contains(err.Error(), "device pi-1") {
		t.Errorf("after the cut-off: %v", err)
	}
	if r := o.receive(resp(9, 0, true)); r != dropLate {
		t.Errorf("after the cut-off: %q", r)
	}
	if o.finished() {
		t.Error("a cut-off op counts as finished: the device would not be told to cancel")
	}
}
