package client_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

// TestTrack: the first list says which named objects are gone; a status
// change reaches Seen; Run ends once every object is done.
func TestTrack(t *testing.T) {
	h, c := newHub(t)
	ctx := ctxT(t)
	if _, err := c.Apply(ctx, []byte(webManifest), false); err != nil {
		t.Fatal(err)
	}
	pi1 := client.ObjectRef{Kind: client.Devices, Name: "pi-1"}
	ghost := client.ObjectRef{Kind: client.Devices, Name: "ghost"}
	tr := c.Track([]client.ObjectRef{pi1, ghost, pi1})
	var log []string
	err := tr.Run(ctx, client.TrackHandler{
		Seen: func(r client.ObjectRef, obj schema.Object) {
			st := obj.(*schema.Device).Status
			log = append(log, "seen "+r.Name)
			if st != nil && st.Online {
				log = append(log, "online "+r.Name)
				tr.Done(r)
			}
		},
		Gone: func(r client.ObjectRef, initially bool) error {
			if !initially {
				return errors.New("gone later")
			}
			log = append(log, "gone "+r.Name)
			tr.Done(r)
			return nil
		},
		Lost: func(err error) { t.Errorf("lost: %v", err) },
		Step: func() error {
			if len(log) == 2 { // after the first list: bring pi-1 online
				return h.SetDeviceStatus("pi-1", &schema.DeviceObservedInfo{Online: true})
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(log, ", "), "seen pi-1, gone ghost, seen pi-1, online pi-1"; got != want {
		t.Errorf("handler saw %q, want %q", got, want)
	}
	if got := tr.Objects(); !slices.Equal(got, []client.ObjectRef{pi1, ghost}) {
		t.Errorf("objects %v", got)
	}
}

func TestTrackSelectedNone(t *testing.T) {
	_, c := newHub(t)
	err := c.TrackSelected(client.Devices, "site=nowhere").Run(ctxT(t), client.TrackHandler{})
	if err == nil || err.Error() != "no devices match the selector site=nowhere" {
		t.Fatalf("Run = %v", err)
	}
}
