package schema

import (
	"regexp"
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "web", "pi-1", "0abc", strings.Repeat("a", 63)} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "A", "a_b", "a.b", "a/b", "+", "#", strings.Repeat("a", 64)} {
		if err := ValidateName(bad); err == nil {
			t.Errorf("ValidateName(%q) = nil, want an error", bad)
		}
	}
}

func TestLabelSelector(t *testing.T) {
	s := LabelSelector{MatchLabels: map[string]string{"role": "sensor"}}
	if !s.Matches(map[string]string{"role": "sensor", "site": "a"}) || s.Matches(map[string]string{"role": "kiosk"}) || s.Matches(nil) {
		t.Error("selector matching is wrong")
	}
	if !(LabelSelector{}).Matches(nil) {
		t.Error("empty selector must match everything")
	}
}

func TestValidateDesiredState(t *testing.T) {
	ds := &DesiredState{TypeMeta: TypeMeta{APIVersion: APIVersion, Kind: KindDesiredState}, Device: "pi-1", Generation: 3,
		Pods: []Pod{{Name: "web", Spec: PodSpec{Containers: []Container{{Name: "c", Image: "busybox"}}}}}}
	if err := ValidateDesiredState(ds); err != nil {
		t.Fatalf("valid desired state refused: %v", err)
	}
	ds.Pods = append(ds.Pods, ds.Pods[0])
	ds.Generation = 0
	err := ValidateDesiredState(ds)
	if err == nil || !strings.Contains(err.Error(), "generation") || !strings.Contains(err.Error(), "pods[1].name") {
		t.Errorf("err = %v, want generation and duplicate pod named", err)
	}
}

func TestValidateDeviceStatus(t *testing.T) {
	st := &DeviceStatus{Device: "pi-1", Pods: []PodStatus{{Name: "web", Phase: PhaseRunning}}}
	if err := ValidateDeviceStatus(st); err != nil {
		t.Fatalf("valid status refused: %v", err)
	}
	st.Pods[0].Phase = "Dancing"
	st.ObservedGeneration = -1
	if err := ValidateDeviceStatus(st); err == nil || !strings.Contains(err.Error(), "pods[0].phase") {
		t.Errorf("err = %v, want pods[0].phase named", err)
	}
}

func TestStrategyMaxUnavailable(t *testing.T) {
	tests := []struct {
		v        string
		targeted int
		want     int
	}{
		{"", 100, 25}, {"10%", 5, 1}, {"3", 100, 3}, {"100%", 8, 8},
	}
	for _, tt := range tests {
		s := Strategy{Type: StrategyRollingUpdate, RollingUpdate: &RollingUpdate{MaxUnavailable: tt.v}}
		if got := s.MaxUnavailable(tt.targeted); got != tt.want {
			t.Errorf("MaxUnavailable(%q, %d) = %d, want %d", tt.v, tt.targeted, got, tt.want)
		}
	}
}

func TestPodSpecHash(t *testing.T) {
	a := PodSpec{Containers: []Container{{Name: "c", Image: "busybox"}}}
	h := PodSpecHash(a)
	if a.Containers[0].ImagePullPolicy != "" {
		t.Error("PodSpecHash modified its argument")
	}
	DefaultPodSpec(&a)
	if PodSpecHash(a) != h {
		t.Error("hash must not depend on whether defaults were applied")
	}
	c := PodSpec{Containers: []Container{{Name: "c", Image: "busybox:2"}}}
	if PodSpecHash(a) == PodSpecHash(c) {
		t.Error("different specs hash the same")
	}
}

func TestTopics(t *testing.T) {
	var tp Topics
	if got := tp.Device("pi-1", TopicDesired); got != "fleet/v1/devices/pi-1/desired" {
		t.Errorf("Device = %q", got)
	}
	dev, kind, err := tp.ParseDevice("fleet/v1/devices/pi-1/status")
	if err != nil || dev != "pi-1" || kind != "status" {
		t.Errorf("ParseDevice = %q %q %v", dev, kind, err)
	}
	for _, bad := range []string{"fleet/v1/devices/pi-1", "fleet/v1/devices//status", "fleet/v1/devices/+/status", "fleet/v1/devices/a/b/status", "other/devices/a/status", "fleet/v1/devices/a/#"} {
		if _, _, err := tp.ParseDevice(bad); err == nil {
			t.Errorf("ParseDevice(%q) succeeded", bad)
		}
	}
	custom := Topics{Prefix: "acme/fleet/"}
	if got := custom.DeviceFilter(TopicStatus); got != "acme/fleet/devices/+/status" {
		t.Errorf("DeviceFilter = %q", got)
	}
}

// dns1123LabelPattern is the definition isDNS1123Label implements.
var dns1123LabelPattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// FuzzIsDNS1123Label: the hand-written check agrees with the regular
// expression on every input.
func FuzzIsDNS1123Label(f *testing.F) {
	for _, s := range []string{"", "a", "-", "a-", "-a", "a-b", "pi-01", "Pi", "a.b", "a_b", "a--b", "0", "é", "a\n", "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := isDNS1123Label(s), dns1123LabelPattern.MatchString(s); got != want {
			t.Fatalf("isDNS1123Label(%q) = %v, the pattern says %v", s, got, want)
		}
	})
}

func BenchmarkValidateName(b *testing.B) {
	for b.Loop() {
		if ValidateName("dev-00042") != nil {
			b.Fatal("invalid")
		}
	}
}
