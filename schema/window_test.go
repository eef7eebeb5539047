package schema

import (
	"strings"
	"testing"
	"time"
)

func TestParseCronNext(t *testing.T) {
	utc := time.UTC
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.ParseInLocation("2006-01-02 15:04", s, utc)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		expr, from, next string
	}{
		{"0 1 * * *", "2026-01-01 00:30", "2026-01-01 01:00"},
		{"0 1 * * *", "2026-01-01 01:00", "2026-01-02 01:00"},
		{"*/15 * * * *", "2026-01-01 00:16", "2026-01-01 00:30"},
		{"30 22 * * 1-5", "2026-01-02 23:00", "2026-01-05 22:30"}, // Friday night → Monday
		{"0 0 1 * *", "2026-01-15 10:00", "2026-02-01 00:00"},
		{"0 0 * * 0", "2026-01-01 00:00", "2026-01-04 00:00"},  // Sunday
		{"0 0 * * 7", "2026-01-01 00:00", "2026-01-04 00:00"},  // 7 is Sunday too
		{"0 0 13 * 5", "2026-01-01 00:00", "2026-01-02 00:00"}, // either day field: Friday the 2nd
		{"5,10 3 * 2 *", "2026-01-01 00:00", "2026-02-01 03:05"},
		{"0-30/10 4 * * *", "2026-01-01 04:11", "2026-01-01 04:20"},
		{"0 0 29 2 *", "2026-03-01 00:00", ""}, // no Feb 29 within a year
	}
	for _, tt := range tests {
		c, err := ParseCron(tt.expr)
		if err != nil {
			t.Fatalf("ParseCron(%q): %v", tt.expr, err)
		}
		got := c.Next(at(tt.from))
		if tt.next == "" {
			if !got.IsZero() {
				t.Errorf("%q after %s: %v, want none within a year", tt.expr, tt.from, got)
			}
			continue
		}
		if want := at(tt.next); !got.Equal(want) {
			t.Errorf("%q after %s: %v, want %v", tt.expr, tt.from, got, want)
		}
	}
}

func TestParseCronErrors(t *testing.T) {
	for _, tt := range []struct{ expr, want string }{
		{"0 1 * *", "want 5 fields"},
		{"0 1 * * * *", "want 5 fields"},
		{"60 1 * * *", `minute field "60"`},
		{"0 24 * * *", `hour field "24"`},
		{"0 1 0 * *", `day of month field "0"`},
		{"0 1 * 13 *", `month field "13"`},
		{"0 1 * * 8", `day of week field "8"`},
		{"0 5-1 * * *", "runs backwards"},
		{"*/0 * * * *", "step"},
		{"a * * * *", "want a number from 0 to 59"},
		{"01 * * * *", "want a number"},
	} {
		_, err := ParseCron(tt.expr)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseCron(%q) = %v, want an error with %q", tt.expr, err, tt.want)
		}
	}
}

// TestUpdateWindowOpen: the window opens at each start, in its zone, for
// its duration, across midnight too.
func TestUpdateWindowOpen(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	w := UpdateWindow{Schedule: "0 23 * * *", Duration: "4h"}
	for _, tt := range []struct {
		now        string // in Paris
		open       bool
		until, nxt string
	}{
		{"2026-01-10 22:59", false, "", "2026-01-10 23:00"},
		{"2026-01-10 23:00", true, "2026-01-11 03:00", ""},
		{"2026-01-11 02:59", true, "2026-01-11 03:00", ""},
		{"2026-01-11 03:00", false, "", "2026-01-11 23:00"},
	} {
		now, _ := time.ParseInLocation("2006-01-02 15:04", tt.now, paris)
		open, until, next := w.Open(now, paris)
		if open != tt.open {
			t.Errorf("at %s: open %v, want %v", tt.now, open, tt.open)
		}
		if got := until.In(paris).Format("2006-01-02 15:04"); tt.until != "" && got != tt.until {
			t.Errorf("at %s: until %s, want %s", tt.now, got, tt.until)
		}
		if got := next.In(paris).Format("2006-01-02 15:04"); tt.nxt != "" && got != tt.nxt {
			t.Errorf("at %s: next %s, want %s", tt.now, got, tt.nxt)
		}
	}
	// The same instant in UTC is an hour earlier: the device's zone counts.
	now := time.Date(2026, 1, 10, 22, 30, 0, 0, time.UTC) // 23:30 in Paris
	if open, _, _ := w.Open(now, paris); !open {
		t.Errorf("22:30 UTC is 23:30 in Paris: want open")
	}
	if open, _, _ := w.Open(now, time.UTC); open {
		t.Errorf("22:30 UTC: want closed in UTC")
	}
	named := UpdateWindow{Schedule: "0 23 * * *", Duration: "4h", TimeZone: "Europe/Paris"}
	if loc := named.Location(time.UTC); loc.String() != "Europe/Paris" {
		t.Errorf("named zone: %v", loc)
	}
}

func TestValidateUpdateWindowAndLock(t *testing.T) {
	type fieldErr struct{ field, msg string }
	for _, tt := range []struct {
		name, spec string
		want       []fieldErr
	}{
		{"issue example", `updateWindow: {schedule: "0 1 * * *", duration: 4h, timeZone: device}`, nil},
		{"named zone and lock", `updateWindow: {schedule: "0 1 * * *", duration: 90m, timeZone: Europe/Paris}
  updateLock: {deadline: 10m, onDeadline: wait}`, nil},
		{"malformed schedule", `updateWindow: {schedule: "0 25 * * *", duration: 4h}`, []fieldErr{{"spec.updateWindow.schedule", `hour field "25"`}}},
		{"four fields", `updateWindow: {schedule: "0 1 * *", duration: 4h}`, []fieldErr{{"spec.updateWindow.schedule", "want 5 fields"}}},
		{"duration over 24h", `updateWindow: {schedule: "0 1 * * *", duration: 25h}`, []fieldErr{{"spec.updateWindow.duration", "at most 24h"}}},
		{"no duration", `updateWindow: {schedule: "0 1 * * *"}`, []fieldErr{{"spec.updateWindow.duration", "required"}}},
		{"unknown zone", `updateWindow: {schedule: "0 1 * * *", duration: 4h, timeZone: Mars/Olympus}`, []fieldErr{{"spec.updateWindow.timeZone", `unknown time zone "Mars/Olympus"`}}},
		{"lock path outside the pod", `updateLock: {path: "/run/../../etc"}`, []fieldErr{{"spec.updateLock.path", "clean absolute path"}}},
		{"relative lock path", `updateLock: {path: "lock"}`, []fieldErr{{"spec.updateLock.path", "clean absolute path"}}},
		{"lock path in /proc", `updateLock: {path: /proc/1}`, []fieldErr{{"spec.updateLock.path", "under /proc"}}},
		{"bad policy", `updateLock: {onDeadline: ignore}`, []fieldErr{{"spec.updateLock.onDeadline", `unsupported value "ignore"`}}},
		{"bad deadline", `updateLock: {deadline: soon}`, []fieldErr{{"spec.updateLock.deadline", "positive duration"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			doc := `apiVersion: fleet/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {site: lab}}
  template: {spec: {containers: [{name: app, image: "nginx:1"}]}}
  ` + tt.spec + "\n"
			_, err := DecodeManifests([]byte(doc))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			ves := ValidationErrors(err)
			if len(ves) != 1 || len(ves[0].Errors) != len(tt.want) {
				t.Fatalf("err = %v, want %d errors", err, len(tt.want))
			}
			for i, w := range tt.want {
				if got := ves[0].Errors[i]; got.Field != w.field || !strings.Contains(got.Message, w.msg) {
					t.Errorf("error %d = %q, want field %s with %q", i, got.String(), w.field, w.msg)
				}
			}
		})
	}
}
