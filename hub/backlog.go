package hub

import (
	"log/slog"
)

// warnListenBacklog warns, once the hub knows how many devices it serves,
// when the embedded broker's listen queue (net.core.somaxconn) is shorter
// than the fleet: after a hub restart every device reconnects within a
// second or two, and each connection that finds the queue full costs that
// device a TCP retransmission (1 s, then 3 s). backlog reads the limit.
func warnListenBacklog(log *slog.Logger, devices int, backlog func() (int, error)) {
	n, err := backlog()
	if err != nil {
		log.Debug("cannot read the listen backlog limit", "err", err)
		return
	}
	if devices <= n {
		return
	}
	log.Warn("the kernel's listen backlog is shorter than the fleet: when every device reconnects at once (after a hub restart), those that do not fit wait for TCP retransmissions; raise it, e.g. sysctl -w net.core.somaxconn=16384",
		"somaxconn", n, "devices", devices)
}
