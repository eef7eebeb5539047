package schema

import (
	"slices"
	"strings"
	"testing"
)

func TestParseBrokerList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string // substring of the error; "" for none
	}{
		{in: "tcp://h1:1883", want: []string{"tcp://h1:1883"}},
		{in: "ssl://h1:8883,ssl://h2:8883, ssl://h3 ", want: []string{"ssl://h1:8883", "ssl://h2:8883", "ssl://h3"}},
		{in: "", err: "broker 1 of 1: empty"},
		{in: "ssl://h1,", err: "broker 2 of 2: empty"},
		{in: "ssl://h1,tcp//h2,ssl://h3", err: "broker 2 of 3"},
		{in: "ssl://h1,ssl://h2,http://h3", err: "broker 3 of 3: broker \"http://h3\": scheme must be"},
		{in: "ssl://h1,ssl://:8883", err: "broker 2 of 2: broker \"ssl://:8883\": no host"},
		{in: "ssl://h1:8883,ssl://H1", err: "broker 2 of 2: ssl://H1:8883 is broker 1 already"},
		{in: "ssl://h1,ssl://dev:s3cret@h2", err: "broker 2 of 2: \"ssl://dev:xxxxx@h2:8883\" carries credentials"},
	} {
		got, err := ParseBrokerList(tc.in)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("ParseBrokerList(%q): %v", tc.in, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseBrokerList(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.err)
		case tc.err == "" && !slices.Equal(got, tc.want):
			t.Errorf("ParseBrokerList(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseBrokerList(%q): the error repeats the password: %v", tc.in, err)
		}
	}
}

func TestCheckBrokerListFillsPorts(t *testing.T) {
	us, err := CheckBrokerList([]string{"mqtts://a", "tcp://b"})
	if err != nil {
		t.Fatal(err)
	}
	if us[0].Host != "a:8883" || us[1].Host != "b:1883" {
		t.Fatalf("hosts %s, %s", us[0].Host, us[1].Host)
	}
	if _, err := CheckBrokerList(nil); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty list: %v", err)
	}
}
