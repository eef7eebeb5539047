package printers

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

func TestTables(t *testing.T) {
	tests := []struct {
		name   string
		format Format
		kind   client.Kind
		objs   []schema.Object
		want   string
	}{
		{"deployments", Table, client.Deployments,
			[]schema.Object{deployment("web", &schema.DeploymentStatus{Targeted: 12, Updated: 10, Ready: 9, Pending: 2}), deployment("telemetry-agent", nil)}, `
NAME              TARGETED   UPDATED   READY   PENDING   GENERATION   AGE
web               12         10        9       2         3            90m
telemetry-agent   0          0         0       0         3            90m
`},
		{"deployments wide", Wide, client.Deployments, []schema.Object{deployment("web", nil)}, `
NAME   TARGETED   UPDATED   READY   PENDING   GENERATION   AGE   SELECTOR           IMAGES               STRATEGY
web    0          0         0       0         3            90m   app=web,site=lab   nginx:1.25,busybox   RollingUpdate(1)
`},
		{"devices, one never seen", Table, client.Devices, []schema.Object{seenDevice(), device("pi-new", nil)}, `
NAME         ONLINE   LAST-SEEN   GENERATION   PODS   CONVERGED   AGE
pi-kitchen   true     5s          4/4          1/2    true        3d
pi-new       false    <never>     0/0          0/0    false       3d
`},
		{"devices wide", Wide, client.Devices, []schema.Object{seenDevice(), device("pi-new", nil)}, `
NAME         ONLINE   LAST-SEEN   GENERATION   PODS   CONVERGED   AGE   LABELS                             ARCH     AGENT
pi-kitchen   true     5s          4/4          1/2    true        3d    fleet/device=pi-kitchen,site=lab   arm64    v0.3.1
pi-new       false    <never>     0/0          0/0    false       3d    fleet/device=pi-new,site=lab       <none>   <none>
`},
		{"names", Name, client.Devices, []schema.Object{seenDevice(), device("pi-new", nil)}, `
device/pi-kitchen
device/pi-new
`},
		{"empty table prints nothing", Table, client.Devices, nil, "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			p := &Printer{Out: &b, Format: tt.format, Now: func() time.Time { return now }}
			if err := p.PrintList(tt.kind, tt.objs, "17"); err != nil {
				t.Fatal(err)
			}
			if want := strings.TrimPrefix(tt.want, "\n"); b.String() != want {
				t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
			}
		})
	}
}

func TestNoHeaders(t *testing.T) {
	var b bytes.Buffer
	p := &Printer{Out: &b, Format: Table, NoHeaders: true, Now: func() time.Time { return now }}
	p.PrintList(client.Devices, []schema.Object{device("pi", nil)}, "")
	if strings.Contains(b.String(), "NAME") {
		t.Fatalf("header printed: %q", b.String())
	}
}

func TestStreamTableMatchesTabwriter(t *testing.T) {
	headers := Headers(schema.KindDevice, false)
	rows := [][]string{Row(seenDevice(), false, now), Row(device("pi-new", nil), false, now)}
	var want, got bytes.Buffer
	if err := WriteTable(&want, headers, rows); err != nil {
		t.Fatal(err)
	}
	st := NewStreamTable(&got, headers)
	if err := st.Write(rows...); err != nil {
		t.Fatal(err)
	}
	if got.String() != want.String() {
		t.Fatalf("stream table\n%s\ntabwriter\n%s", got.String(), want.String())
	}
	// Later rows keep the columns of the first batch.
	got.Reset()
	st.Write(Row(device("pi-2", nil), false, now))
	if !strings.HasPrefix(got.String(), "pi-2         false") {
		t.Fatalf("later row not aligned: %q", got.String())
	}
}

func TestHumanDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-5 * time.Second:                  "<invalid>",
		-500 * time.Millisecond:           "0s",
		0:                                 "0s",
		90 * time.Second:                  "90s",
		5*time.Minute + 30*time.Second:    "5m30s",
		5 * time.Minute:                   "5m",
		45 * time.Minute:                  "45m",
		5*time.Hour + 30*time.Minute:      "5h30m",
		20 * time.Hour:                    "20h",
		(3*24 + 5) * time.Hour:            "3d5h",
		300 * 24 * time.Hour:              "300d",
		(2*365 + 100) * 24 * time.Hour:    "2y100d",
		10 * 365 * 24 * time.Hour:         "10y",
		119*time.Second + time.Nanosecond: "119s",
	} {
		if got := HumanDuration(d); got != want {
			t.Errorf("HumanDuration(%v) = %q, want %q", d, got, want)
		}
	}
	if got := Age(nil, now); got != "<unknown>" {
		t.Errorf("Age(nil) = %q", got)
	}
}
