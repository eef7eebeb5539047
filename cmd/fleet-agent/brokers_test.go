package main

import (
	"bytes"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/brokertest"
	"github.com/fleetmq/fleet/schema"
)

// TestBrokerListSettings: --broker, FLEET_AGENT_BROKER and the config
// file's broker: (a comma string or a YAML list) all give the list, in
// order; a malformed entry is refused naming its position.
func TestBrokerListSettings(t *testing.T) {
	want := []string{"ssl://h1:8883", "ssl://h2:8883", "ssl://h3:8883"}
	for name, args := range map[string][]string{
		"flag":             {"--broker", "ssl://h1:8883, ssl://h2:8883,ssl://h3:8883"},
		"file, a list":     {"--config", writeFile(t, "a.yaml", "broker:\n  - ssl://h1:8883\n  - ssl://h2:8883\n  - ssl://h3:8883\n")},
		"file, a string":   {"--config", writeFile(t, "b.yaml", "broker: ssl://h1:8883,ssl://h2:8883,ssl://h3:8883\n")},
		"flag beats file":  {"--broker", strings.Join(want, ","), "--config", writeFile(t, "c.yaml", "broker: [tcp://other:1883]\n")},
		"file, one string": {"--config", writeFile(t, "d.yaml", "broker: ssl://h1:8883\n")},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := parse(t, append(args, "--device", "pi-1", "--state-dir", t.TempDir())...)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.brokers()
			w := want
			if name == "file, one string" {
				w = want[:1]
			}
			if err != nil || strings.Join(got, " ") != strings.Join(w, " ") {
				t.Fatalf("brokers %q, %v; want %q", got, err, w)
			}
		})
	}
	t.Run("environment", func(t *testing.T) {
		t.Setenv("FLEET_AGENT_BROKER", "tcp://a:1883,tcp://b:1883")
		c, err := parse(t, "--device", "pi-1", "--state-dir", t.TempDir())
		if got, _ := c.brokers(); err != nil || len(got) != 2 || got[1] != "tcp://b:1883" {
			t.Fatalf("brokers %q, %v", got, err)
		}
	})
	for _, tc := range []struct{ name, args, file, want string }{
		{name: "bad second URL", args: "ssl://h1:8883,ssl//h2:8883", want: "--broker: broker 2 of 2: "},
		{name: "bad scheme third", args: "ssl://h1,ssl://h2,http://h3", want: `--broker: broker 3 of 3: broker "http://h3": scheme must be`},
		{name: "stray comma", args: "ssl://h1,", want: "--broker: broker 2 of 2: empty"},
		{name: "twice", args: "ssl://h1,ssl://h1:8883", want: "--broker: broker 2 of 2: ssl://h1:8883 is broker 1 already"},
		{name: "file list entry", file: "broker:\n  - ssl://h1\n  - tcp//h2\n", want: "--broker: broker 2 of 2"},
		{name: "file list with a comma", file: "broker:\n  - ssl://h1,ssl://h2\n", want: "entry 1 of 1 holds a comma"},
		{name: "file not a list of strings", file: "broker:\n  a: b\n", want: "broker: want a URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"--device", "pi-1", "--state-dir", t.TempDir()}
			if tc.args != "" {
				args = append(args, "--broker", tc.args)
			}
			if tc.file != "" {
				args = append(args, "--config", writeFile(t, "agent.yaml", tc.file))
			}
			_, err := parse(t, args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// TestBrokerListTLS: a CA pin covers every broker, so a list that mixes
// plain and TLS brokers with one is refused; an all-TLS list gets one
// configuration (ForBroker makes each broker's).
func TestBrokerListTLS(t *testing.T) {
	hash := "sha256:" + strings.Repeat("ab", 32)
	c, err := parse(t, "--device", "pi-1", "--state-dir", t.TempDir(), "--broker", "ssl://h1:8883,tcp://h2:1883", "--ca-hash", hash)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.brokerTLS(nil); err == nil || !strings.Contains(err.Error(), "plain ones (tcp://h2:1883)") {
		t.Fatalf("mixed list with a CA pin: %v", err)
	}
	c, err = parse(t, "--device", "pi-1", "--state-dir", t.TempDir(), "--broker", "ssl://h1:8883,ssl://10.0.0.2:8883", "--ca-hash", hash)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err := c.brokerTLS(nil)
	if err != nil || cfg == nil || cfg.ServerName != "h1" {
		t.Fatalf("all-TLS list: %v, %v", cfg, err)
	}
}

// TestJoinBrokerSubset: --broker given with --join may name some of the
// join string's brokers, in any order, and no other.
func TestJoinBrokerSubset(t *testing.T) {
	s, _ := testJoinString(t, schema.JoinInfo{
		Brokers: []string{"ssl://h1:8883", "ssl://h2:8883", "ssl://h3:8883"}, Device: "pi-1", Token: "device-token",
	})
	c, err := parse(t, "--join", s, "--broker", "ssl://h3,ssl://h1:8883", "--state-dir", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := c.brokers(); strings.Join(got, ",") != "ssl://h3,ssl://h1:8883" {
		t.Fatalf("brokers %q", got)
	}
	_, err = parse(t, "--join", s, "--broker", "ssl://h1:8883,ssl://rogue:8883", "--state-dir", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "ssl://rogue:8883 is not one of its brokers") {
		t.Fatalf("a broker outside the join string: %v", err)
	}
}

// refusingHook answers every CONNECT with CONNACK "server unavailable",
// as a standby hub's broker does.
type refusingHook struct {
	mqtt.HookBase
	srv *mqtt.Server
}

func (h *refusingHook) ID() string { return "refusing" }
func (h *refusingHook) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnConnect, mqtt.OnConnectAuthenticate}, []byte{b})
}
func (h *refusingHook) OnConnect(cl *mqtt.Client, _ packets.Packet) error {
	if err := h.srv.SendConnack(cl, packets.ErrServerUnavailable, false, nil); err != nil {
		return err
	}
	return packets.ErrServerUnavailable
}
func (h *refusingHook) OnConnectAuthenticate(*mqtt.Client, packets.Packet) bool { return false }

func startRefusing(t *testing.T) string {
	t.Helper()
	srv := mqtt.New(&mqtt.Options{Logger: slog.New(slog.DiscardHandler)})
	if err := srv.AddHook(&refusingHook{srv: srv}, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := broker.NewListener("standby", ln, nil, 10*time.Second)
	if err := srv.AddListener(l); err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return "tcp://" + l.Address()
}

// TestCheckEveryBroker: `fleet-agent check` with three brokers (a
// standby that refuses, one down, one that accepts the device) tries each
// and says which answer; the check of the broker list passes because one
// accepts. With none accepting, it fails.
func TestCheckEveryBroker(t *testing.T) {
	standby, down := startRefusing(t), "tcp://"+closedPort(t)
	auth := broker.NewStaticAuth()
	auth.Set(broker.Identity{Name: "pi-1", Role: broker.RoleDevice}, "device-token")
	b := brokertest.Start(t, broker.Options{Addr: "127.0.0.1:0", Auth: auth, Logger: slog.New(slog.DiscardHandler)})
	leader := "tcp://" + b.Addr().String()
	token := writeFile(t, "token", "device-token\n")
	args := func(brokers ...string) []string {
		return []string{"--device", "pi-1", "--token-file", token, "--state-dir", t.TempDir(), "--containerd-socket", "/nonexistent.sock", "--broker", strings.Join(brokers, ",")}
	}
	// --timeout above the 3 s the check waits for a retained state.
	out, _ := checkLines(t, append(args(standby, down, leader), "--timeout", "5s")...)
	for _, want := range []string{
		`(?m)^ok +config +3 brokers tcp://127\.0\.0\.1:\d+, tcp://127\.0\.0\.1:\d+, tcp://127\.0\.0\.1:\d+, topic prefix`,
		`(?m)^ok +broker +` + regexp.QuoteMeta(standby) + `: refused the device: server unavailable \(a standby hub's broker`,
		`(?m)^warn +broker +` + regexp.QuoteMeta(down) + ` as pi-1: .*connection refused \(the agent uses another broker of the list\)$`,
		`(?m)^ok +broker +` + regexp.QuoteMeta(leader) + `: logged in as pi-1 in `,
		`(?m)^ok +broker list +1 of 3 brokers accept device pi-1 \(` + regexp.QuoteMeta(leader) + `\)`,
		`(?m)^warn +desired state +nothing retained on fleet/v1/devices/pi-1/desired`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("no line matching %s in\n%s", want, out)
		}
	}
	out, err := checkLines(t, args(standby, down)...)
	if err == nil {
		t.Fatalf("no broker accepts, yet the check passed:\n%s", out)
	}
	for _, want := range []string{
		`(?m)^FAIL +broker +` + regexp.QuoteMeta(standby) + `: refused the device: server unavailable`,
		`(?m)^FAIL +broker +` + regexp.QuoteMeta(down) + ` as pi-1: `,
		`(?m)^FAIL +broker list +none of the 2 brokers accepts device pi-1`,
		`(?m)^FAIL +desired state +not checked: no connection to a broker$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("no line matching %s in\n%s", want, out)
		}
	}
	out, _ = checkLines(t, args(standby)...)
	if !regexp.MustCompile(`(?m)^FAIL +broker +` + regexp.QuoteMeta(standby) + ` as pi-1: server Unavailable \(a standby hub's broker refuses devices: give the agent every hub's broker`).MatchString(out) {
		t.Errorf("a single standby broker: no hint in\n%s", out)
	}
}
