package schema

import (
	"fmt"
	"strings"
)

// DefaultTopicPrefix is the prefix of every Fleet MQTT topic.
const DefaultTopicPrefix = "fleet/v1"

// Topic kinds under fleet/v1/devices/{device}/.
const (
	TopicDesired = "desired"
	TopicStatus  = "status"
	TopicOnline  = "online"
	TopicEvents  = "events"
	// TopicCrashReports carries a device's crash reports (the last lines
	// of a crashed container's log, schema.CrashReport): the device
	// publishes its own (QoS 1, not retained) and only the hub reads
	// them. The event about the crash, on TopicEvents, says only that
	// there is one (Event.CrashReport): a log may hold what a monitor,
	// which reads events, must not see.
	TopicCrashReports = "crashreports"
	// TopicCSR is where a device asks for a renewed client certificate
	// (mutual TLS): a DeviceCertificateRequest, QoS 0, not retained. Only
	// that device publishes there and only the hub reads it; the hub
	// trusts the device's MQTT login (its token) as it trusts an
	// enrollment.
	TopicCSR = "csr"
	// TopicCertificate carries the hub's answer, a DeviceCertificate, QoS
	// 1, not retained: only the hub publishes there and only that device
	// reads it.
	TopicCertificate = "certificate"
)

// Payloads of the online topic.
const (
	Online  = "online"
	Offline = "offline"
)

// Topics builds and parses topic names under one prefix. The zero value
// uses DefaultTopicPrefix.
type Topics struct {
	Prefix string
}

func (t Topics) prefix() string {
	if t.Prefix == "" {
		return DefaultTopicPrefix
	}
	return strings.TrimSuffix(t.Prefix, "/")
}

// Device returns prefix/devices/{device}/{kind}.
func (t Topics) Device(device, kind string) string {
	return t.prefix() + "/devices/" + device + "/" + kind
}

// DeviceFilter returns the subscription filter prefix/devices/+/{kind}.
func (t Topics) DeviceFilter(kind string) string {
	return t.prefix() + "/devices/+/" + kind
}

// DeploymentStatus returns prefix/deployments/{name}/status.
func (t Topics) DeploymentStatus(name string) string {
	return t.prefix() + "/deployments/" + name + "/status"
}

// ParseDevice splits prefix/devices/{device}/{kind}. It fails on any other
// shape, including wildcards and empty levels.
func (t Topics) ParseDevice(topic string) (device, kind string, err error) {
	rest, ok := strings.CutPrefix(topic, t.prefix()+"/devices/")
	if !ok {
		return "", "", fmt.Errorf("topic %q: not under %s/devices/", topic, t.prefix())
	}
	device, kind, ok = strings.Cut(rest, "/")
	if !ok || device == "" || kind == "" || strings.ContainsAny(rest, "/+#") && strings.Count(rest, "/") != 1 || strings.ContainsAny(rest, "+#") {
		return "", "", fmt.Errorf("topic %q: want %s/devices/{device}/{kind}", topic, t.prefix())
	}
	return device, kind, nil
}
