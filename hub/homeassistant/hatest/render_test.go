package hatest

import "testing"

func TestRender(t *testing.T) {
	payload := []byte(`{"a":{"b":3,"f":4.5,"s":"0x0"},"l":[{"k":true,"n":1,"p":"Running"},{"k":false,"n":2,"p":"Failed"}]}`)
	cases := []struct{ tpl, want string }{
		{"{{ value_json.a.b }}", "3"},
		{"{{ value_json.a.f }}", "4.5"},
		{"{{value_json.a.s}}", "0x0"},
		{"{{ value_json.a.s != '0x0' }}", "False"},
		{"{{ value_json.l | length }}", "2"},
		{"{{ value_json.l | selectattr('k') | list | length }}", "1"},
		{"{{ value_json.l | selectattr('p', 'eq', 'Failed') | list | length }}", "1"},
		{"{{ value_json.l | rejectattr('k') | rejectattr('p', 'equalto', 'Failed') | list | length == 0 }}", "True"},
		{"{{ value_json.l | map(attribute='n') | sum }}", "3"},
		{"{{ value_json.a.b == 3 }}", "True"},
	}
	for _, tc := range cases {
		got, err := Render(tc.tpl, payload)
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.tpl, got, err, tc.want)
		}
	}
	for _, bad := range []string{
		"value_json.a", "{{ value_json.x }}", "{{ value_json.a | upper }}", "{{ states('x') }}",
		"{{ value_json.l | selectattr() | list }}", "{{ value_json.a.b }} {{ value_json.a.b }}", "{{ value_json.a.b + 1 }}",
	} {
		if got, err := Render(bad, payload); err == nil {
			t.Errorf("%s: rendered %q, want an error", bad, got)
		}
	}
}

func TestCheckRefuses(t *testing.T) {
	good := `{"name":"n","unique_id":"u","state_topic":"s","device":{"identifiers":["i"],"name":"d"},"origin":{"name":"Fleet"},"availability":[{"topic":"t"}]}`
	if _, err := Check("homeassistant", "homeassistant/sensor/fleet_a/x/config", []byte(good)); err != nil {
		t.Fatal(err)
	}
	for topic, payload := range map[string]string{
		"homeassistant/sensor/fleet_a/x/config":        `{"name":"n","uniq_id":"u","state_topic":"s","device":{"identifiers":["i"],"name":"d"},"origin":{"name":"Fleet"},"availability":[{"topic":"t"}]}`,
		"homeassistant/sensor/fleet a/x/config":        good,
		"homeassistant/switch/fleet_a/x/config":        good,
		"homeassistant/sensor/fleet_a/x/state":         good,
		"homeassistant/sensor/fleet_a/y/config":        `{"name":"n","unique_id":"u","state_topic":"s","device":{"name":"d"},"origin":{"name":"Fleet"},"availability":[{"topic":"t"}]}`,
		"homeassistant/sensor/fleet_a/z/config":        `{"name":"n","unique_id":"u","device":{"identifiers":["i"],"name":"d"},"origin":{"name":"Fleet"},"availability":[{"topic":"t"}]}`,
		"homeassistant/sensor/fleet_a/w/config":        `[]`,
		"homeassistant/binary_sensor/fleet_a/v/config": `{"name":"n","unique_id":"u","state_topic":"s","payload_on":"x","device":{"identifiers":["i"],"name":"d"},"origin":{"name":"Fleet"},"availability":[{"topic":"t"}]}`,
	} {
		if _, err := Check("homeassistant", topic, []byte(payload)); err == nil {
			t.Errorf("%s %s: accepted", topic, payload)
		}
	}
}
