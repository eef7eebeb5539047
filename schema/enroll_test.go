package schema

import (
	"strings"
	"testing"
)

func TestEnrollTopics(t *testing.T) {
	var tp Topics
	const id = "req_0123456789abcdef"
	if got := tp.Enroll(id, TopicEnrollRequest); got != "fleet/v1/enroll/"+id+"/request" {
		t.Errorf("Enroll = %q", got)
	}
	if got := tp.EnrollRequestFilter(); got != "fleet/v1/enroll/+/request" {
		t.Errorf("EnrollRequestFilter = %q", got)
	}
	if got := (Topics{Prefix: "site/a/"}).Enroll(id, TopicEnrollResponse); got != "site/a/enroll/"+id+"/response" {
		t.Errorf("custom prefix: %q", got)
	}
	req, kind, err := tp.ParseEnroll("fleet/v1/enroll/" + id + "/request")
	if err != nil || req != id || kind != TopicEnrollRequest {
		t.Errorf("ParseEnroll = %q %q %v", req, kind, err)
	}
	for _, bad := range []string{
		"fleet/v1/enroll/" + id,
		"fleet/v1/enroll/" + id + "/other",
		"fleet/v1/enroll/" + id + "/request/x",
		"fleet/v1/enroll/+/request",
		"fleet/v1/enroll/short/request",
		"fleet/v1/devices/" + id + "/request",
		"other/enroll/" + id + "/request",
	} {
		if _, _, err := tp.ParseEnroll(bad); err == nil {
			t.Errorf("ParseEnroll(%q) succeeded", bad)
		}
	}
}

func TestValidateRequestID(t *testing.T) {
	for _, ok := range []string{"req_abcdefghijklmnop", "req_Ab0_-" + strings.Repeat("x", 11), "req_" + strings.Repeat("z", 64)} {
		if err := ValidateRequestID(ok); err != nil {
			t.Errorf("ValidateRequestID(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "short", "req_short", "req_" + strings.Repeat("z", 65), "abcdefghijklmnopqrst", "raspberry-pi-kitchen", "req_abcdefghijklmno/", "req_abcdefghijklmno+", "req_abcdefghijklmno#", "req_abcdefghij klmno", "inline"} {
		if err := ValidateRequestID(bad); err == nil {
			t.Errorf("ValidateRequestID(%q) succeeded", bad)
		}
	}
}

func TestParseBootstrapToken(t *testing.T) {
	secret := strings.Repeat("a1", 16)
	id, err := ParseBootstrapToken("k3x9pq." + secret)
	if err != nil || id != "k3x9pq" {
		t.Fatalf("ParseBootstrapToken = %q, %v", id, err)
	}
	if BootstrapUsername(id) != "bootstrap.k3x9pq" || ValidateName(BootstrapUsername(id)) == nil {
		t.Errorf("bootstrap username %q must not be a valid device name", BootstrapUsername(id))
	}
	for _, bad := range []string{"", "k3x9pq", "k3x9pq.", "K3X9PQ." + secret, "k3x9p." + secret, "k3x9pq." + secret + "0", "k3x9pq:" + secret, " k3x9pq." + secret} {
		_, err := ParseBootstrapToken(bad)
		if err == nil {
			t.Errorf("ParseBootstrapToken(%q) succeeded", bad)
		} else if bad != "" && strings.Contains(err.Error(), bad) {
			t.Errorf("the error shows the token: %v", err)
		}
	}
	if err := ValidateBootstrapTokenID("k3x9pq"); err != nil {
		t.Error(err)
	}
	if err := ValidateBootstrapTokenID("k3x9pq." + secret); err == nil {
		t.Error("a whole token is not an ID")
	}
}

func TestValidateBootstrapLabels(t *testing.T) {
	if fe := ValidateBootstrapLabels(map[string]string{"site": "north", "example.com/rack": "r1", "empty": ""}); len(fe) != 0 {
		t.Errorf("valid labels: %v", fe)
	}
	for _, l := range []map[string]string{
		{LabelArch: "arm64"},
		{"fleet/anything": "x"},
		{"bad key": "x"},
		{"site": "bad value"},
	} {
		if fe := ValidateBootstrapLabels(l); len(fe) == 0 {
			t.Errorf("ValidateBootstrapLabels(%v) accepted", l)
		}
	}
}
