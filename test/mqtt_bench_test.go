package test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// Scale benchmarks of the hub's MQTT side against a real fleet-hub
// process. Run them one at a time; numbers go to BENCHMARKS.md:
//
//	go test -run XXX -bench MQTTIdleDevices -benchtime 1x ./test/
//	go test -run XXX -bench MQTTApplyPublish -benchtime 5x ./test/

// rawDevice is a minimal MQTT 3.1.1 client over TCP: CONNECT, SUBSCRIBE to
// its desired topic, PUBACK what it receives. Thousands of them cost the
// test process little, so the hub's memory can be measured with many
// connected devices.
type rawDevice struct {
	name string
	conn net.Conn
	// gen is the generation of the last desired state received.
	gen    atomic.Int64
	closed atomic.Bool
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func appendRemaining(b []byte, n int) []byte {
	for {
		d := byte(n % 128)
		n /= 128
		if n > 0 {
			d |= 0x80
		}
		b = append(b, d)
		if n == 0 {
			return b
		}
	}
}

func packet(typ byte, body []byte) []byte {
	return append(appendRemaining([]byte{typ}, len(body)), body...)
}

func readPacket(r *bufio.Reader) (typ byte, body []byte, err error) {
	typ, err = r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, mul := 0, 1
	for i := 0; ; i++ {
		d, err := r.ReadByte()
		if err != nil {
			return 0, nil, err
		}
		n += int(d&0x7f) * mul
		mul *= 128
		if d&0x80 == 0 {
			break
		}
		if i == 3 {
			return 0, nil, errors.New("bad remaining length")
		}
	}
	body = make([]byte, n)
	_, err = io.ReadFull(r, body)
	return typ, body, err
}

// dialRaw connects and subscribes, then reads in the background until the
// connection closes. It returns once the SUBACK is in.
func dialRaw(addr, name, token string, onDesired func(*rawDevice, schema.DesiredState)) (*rawDevice, error) {
	c, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if err != nil {
		return nil, err
	}
	d := &rawDevice{name: name, conn: c}
	var vh []byte
	vh = appendString(vh, "MQTT")
	vh = append(vh, 4, 0x80|0x40|0x02) // level 4; username, password, clean session
	vh = binary.BigEndian.AppendUint16(vh, 600)
	vh = appendString(vh, name)
	vh = appendString(vh, name)
	vh = appendString(vh, token)
	var sub []byte
	sub = binary.BigEndian.AppendUint16(sub, 1)
	sub = appendString(sub, topics.Device(name, schema.TopicDesired))
	sub = append(sub, 1)
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.Write(append(packet(0x10, vh), packet(0x82, sub)...)); err != nil {
		c.Close()
		return nil, err
	}
	r := bufio.NewReaderSize(c, 512)
	typ, body, err := readPacket(r)
	if err != nil || typ != 0x20 || len(body) != 2 || body[1] != 0 {
		c.Close()
		return nil, fmt.Errorf("%s: CONNACK %#x %v: %w", name, typ, body, err)
	}
	subacked := make(chan error, 1)
	go func() {
		defer c.Close()
		acked := false
		for {
			typ, body, err := readPacket(r)
			if err != nil {
				d.closed.Store(true)
				if !acked {
					subacked <- err
				}
				return
			}
			switch typ >> 4 {
			case 9: // SUBACK
				_ = c.SetDeadline(time.Time{})
				acked = true
				if len(body) != 3 || body[2] != 1 {
					subacked <- fmt.Errorf("%s: SUBACK %v", name, body)
					return
				}
				subacked <- nil
			case 3: // PUBLISH
				qos := (typ >> 1) & 3
				if len(body) < 2 {
					return
				}
				tl := int(binary.BigEndian.Uint16(body))
				rest := body[2+tl:]
				if qos > 0 {
					id := rest[:2]
					rest = rest[2:]
					if _, err := c.Write([]byte{0x40, 2, id[0], id[1]}); err != nil {
						return
					}
				}
				var ds schema.DesiredState
				if len(rest) > 0 && json.Unmarshal(rest, &ds) == nil {
					d.gen.Store(ds.Generation)
					if onDesired != nil {
						onDesired(d, ds)
					}
				}
			}
		}
	}()
	if err := <-subacked; err != nil {
		return nil, err
	}
	return d, nil
}

// vmRSS reads a process's resident set size in bytes.
func vmRSS(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// settledRSS waits until the RSS stops moving (the runtime returns freed
// memory lazily) and returns it.
func settledRSS(t testing.TB, pid int) int64 {
	t.Helper()
	prev := vmRSS(t, pid)
	for range 20 {
		time.Sleep(500 * time.Millisecond) // sampling interval of a measurement
		cur := vmRSS(t, pid)
		if d := cur - prev; d < 256<<10 && d > -(256<<10) {
			return cur
		}
		prev = cur
	}
	return prev
}

// addDevices creates n devices (d00000…) labelled fleet=big and returns
// their tokens.
func addDevices(t testing.TB, h *Hub, n int) []string {
	t.Helper()
	for start := 0; start < n; start += 500 {
		docs := make([]string, 0, 500)
		for i := start; i < min(n, start+500); i++ {
			docs = append(docs, deviceYAML(fmt.Sprintf("d%05d", i), map[string]string{"fleet": "big"}))
		}
		applyYAML(t, h, strings.Join(docs, "---\n"))
	}
	tokens := make([]string, n)
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				tokens[i] = issueToken(t, h, fmt.Sprintf("d%05d", i))
			}
		})
	}
	wg.Wait()
	return tokens
}

func connectAll(t testing.TB, h *Hub, tokens []string, onDesired func(*rawDevice, schema.DesiredState)) []*rawDevice {
	t.Helper()
	devs := make([]*rawDevice, len(tokens))
	var wg sync.WaitGroup
	var next atomic.Int64
	var failed atomic.Pointer[error]
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(tokens) || failed.Load() != nil {
					return
				}
				d, err := dialRaw(h.MQTTAddr, fmt.Sprintf("d%05d", i), tokens[i], onDesired)
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				devs[i] = d
			}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, d := range devs {
			if d != nil {
				d.conn.Close()
			}
		}
	})
	if p := failed.Load(); p != nil {
		t.Fatalf("connect: %v", *p)
	}
	return devs
}

// BenchmarkMQTTIdleDevices5000 measures the hub's memory per connected,
// subscribed, idle device, and how long an apply takes to reach all of
// them.
func BenchmarkMQTTIdleDevices5000(b *testing.B) {
	const n = 5000
	h := StartHub(b, HubOptions{Args: []string{"--log-level", "warn"}})
	tokens := addDevices(b, h, n)
	pid := h.PID()
	before := settledRSS(b, pid)

	var got atomic.Int64
	want := atomic.Int64{}
	devs := connectAll(b, h, tokens, func(_ *rawDevice, ds schema.DesiredState) {
		if ds.Generation == want.Load() {
			got.Add(1)
		}
	})
	awaitf(b, 60*time.Second, func() bool {
		for _, d := range devs {
			if d.gen.Load() != 1 {
				return false
			}
		}
		return true
	}, "every device's retained desired state")
	after := settledRSS(b, pid)
	perDevice := float64(after-before) / n
	b.ReportMetric(perDevice/1024, "KiB/device")
	b.ReportMetric(float64(after)/(1<<20), "MiB-rss")
	b.Logf("hub RSS: %.1f MiB with %d devices registered, %.1f MiB with them connected and subscribed: %.1f KiB per connected device",
		float64(before)/(1<<20), n, float64(after)/(1<<20), perDevice/1024)

	// One apply targeting all 5,000: time until every device has it.
	want.Store(2)
	start := time.Now()
	applyYAML(b, h, webYAML("web", "nginx:1", map[string]string{"fleet": "big"}))
	awaitf(b, 60*time.Second, func() bool { return got.Load() == n }, "all %d devices got generation 2 (%d)", n, got.Load())
	b.Logf("apply -> all %d connected devices received their new desired state in %v", n, time.Since(start))
	for _, d := range devs {
		if d.closed.Load() {
			b.Errorf("device %s was disconnected", d.name)
			break
		}
	}
}

// BenchmarkMQTTApplyPublish1000 measures apply → 1,000 connected devices
// have received their new desired state (retained, QoS 1), over TCP.
func BenchmarkMQTTApplyPublish1000(b *testing.B) {
	const n = 1000
	h := StartHub(b, HubOptions{Args: []string{"--log-level", "warn"}})
	tokens := addDevices(b, h, n)
	var want, got atomic.Int64
	done := make(chan struct{}, 1)
	connectAll(b, h, tokens, func(_ *rawDevice, ds schema.DesiredState) {
		if ds.Generation == want.Load() && got.Add(1) == n {
			done <- struct{}{}
		}
	})
	var published []time.Duration
	b.ResetTimer()
	for i := range b.N {
		got.Store(0)
		want.Store(int64(i + 2))
		start := time.Now()
		applyYAML(b, h, webYAML("web", fmt.Sprintf("nginx:%d", i), map[string]string{"fleet": "big"}))
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			b.Fatalf("iteration %d: %d of %d devices got the new desired state", i, got.Load(), n)
		}
		published = append(published, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(published, func(i, j int) bool { return published[i] < published[j] })
	b.ReportMetric(float64(published[len(published)/2].Microseconds())/1000, "ms-p50")
	b.ReportMetric(float64(published[len(published)-1].Microseconds())/1000, "ms-max")
	var metrics bytes.Buffer
	code, body := h.Do(b, http.MethodGet, "/metrics", nil)
	if code == http.StatusOK {
		for _, l := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(l, "fleet_desired_publishes_total") || strings.HasPrefix(l, "fleet_controller_reconcile_duration_seconds_sum") || strings.HasPrefix(l, "fleet_controller_reconcile_duration_seconds_count") {
				metrics.WriteString(l + "; ")
			}
		}
	}
	b.Logf("apply -> %d devices received: %v (hub: %s)", n, published, metrics.String())
}
