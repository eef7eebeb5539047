#!/usr/bin/env bash
# demo.sh — the whole Fleet on this machine: a private containerd, a hub and
# three agents (three pretend Raspberry Pis), then convergence, self-healing
# and an offline device catching up.
#
#   bash test/demo/demo.sh up      # what `make demo` runs (as root); ends
#                                  # with the dashboard's URL and a read-only token
#   bash test/demo/demo.sh status  # what runs, and the fleet's state
#   bash test/demo/demo.sh down    # what `make demo-down` runs
#
# Everything lives in ./.demo (data, logs, containerd's root and state, the
# PIDs in ./.demo/pids); nothing is installed or changed elsewhere, except
# containerd and runc, installed with apt-get if missing. `down` stops every
# process `up` started, removes every task, container and snapshot, unmounts
# whatever is mounted under ./.demo and removes it.
#
# Settings (environment): FLEET_DEMO_DIR (./.demo), FLEET_DEMO_HTTP_ADDR
# (127.0.0.1:18080), FLEET_DEMO_MQTT_ADDR (127.0.0.1:11883),
# FLEET_DEMO_HTTPS_ADDR (127.0.0.1:18443), FLEET_DEMO_MQTTS_ADDR
# (127.0.0.1:18883; the hub's TLS listeners, loopback only: empty turns
# one off), FLEET_DEMO_DISPLAY_ADDR (127.0.0.1:18090), FLEET_DEMO_BIN
# (a directory holding fleet, fleet-hub and fleet-agent: skips `make build`).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEMO_DIR=${FLEET_DEMO_DIR:-$REPO/.demo}
HTTP_ADDR=${FLEET_DEMO_HTTP_ADDR:-127.0.0.1:18080}
MQTT_ADDR=${FLEET_DEMO_MQTT_ADDR:-127.0.0.1:11883}
# The hub's TLS listeners (on by default in fleet-hub, on every
# interface): loopback here, on ports of the demo's own. The demo's
# agents and CLI use the plain loopback listeners.
HTTPS_ADDR=${FLEET_DEMO_HTTPS_ADDR-127.0.0.1:18443}
MQTTS_ADDR=${FLEET_DEMO_MQTTS_ADDR-127.0.0.1:18883}
# Where the shop-display pod serves (host network); the manifest says
# 127.0.0.1:18090.
DISPLAY_ADDR=${FLEET_DEMO_DISPLAY_ADDR:-127.0.0.1:18090}
BIN=${FLEET_DEMO_BIN:-$REPO/bin}
DEVICES=(demo-pi-1 demo-pi-2 demo-pi-3)
declare -A ROLE=([demo-pi-1]=sensor [demo-pi-2]=display [demo-pi-3]=sensor)
IMAGE=fleet.demo/app:v1
PIDS=$DEMO_DIR/pids
LOGS=$DEMO_DIR/logs
CTD_DIR=$DEMO_DIR/containerd
export FLEET_CONFIG=$DEMO_DIR/hub/admin.conf

say() { printf '\n==> %s\n' "$*"; }
note() { printf '    %s\n' "$*"; }
die() {
	printf '\ndemo.sh: %s\n' "$*" >&2
	exit 1
}
fleet() { "$BIN/fleet" "$@"; }
ns_of() { echo "fleet-$1"; }

# The containerd socket: under .demo when the path is short enough for a
# unix socket (108 bytes, with ".ttrpc" appended), else under /run.
socket_path() {
	if [ -f "$DEMO_DIR/socket" ]; then
		cat "$DEMO_DIR/socket"
	elif [ ${#CTD_DIR} -lt 80 ]; then
		echo "$CTD_DIR/c.sock"
	else
		echo "/run/fleet-demo-$(printf '%s' "$DEMO_DIR" | cksum | cut -d' ' -f1)/c.sock"
	fi
}

need_root() {
	if [ "$(id -u)" -ne 0 ]; then
		cat >&2 <<-EOF
			demo.sh: the demo needs root: it runs a private containerd, which
			mounts container filesystems and creates cgroups, and it may install
			containerd and runc with apt-get. Run it as root, e.g.:
			    sudo make demo        (and later: sudo make demo-down)
		EOF
		exit 1
	fi
}

# wait_until DESCRIPTION SECONDS COMMAND...: polls COMMAND every half second.
wait_until() {
	local what=$1 secs=$2
	shift 2
	local i
	for ((i = 0; i < secs * 2; i++)); do
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.5
	done
	die "timed out after ${secs}s waiting for $what (logs: $LOGS)"
}

# start_bg NAME COMMAND...: starts COMMAND in its own session (immune to
# the terminal's ^C), logging to $LOGS/NAME.log, and records "NAME PID" in
# $PIDS.
start_bg() {
	local name=$1
	shift
	rm -f "$DEMO_DIR/run/$name.pid"
	setsid bash -c 'echo $$ > "$0"; exec "$@"' "$DEMO_DIR/run/$name.pid" "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
	wait_until "$name to start" 10 test -s "$DEMO_DIR/run/$name.pid"
	local pid
	pid=$(cat "$DEMO_DIR/run/$name.pid")
	sed -i "/^$name /d" "$PIDS"
	echo "$name $pid $1" >>"$PIDS"
	# Until the exec, the process is still the bash above.
	wait_until "$name to start" 10 pid_of "$name"
}

# pid_of NAME: the recorded PID of NAME if that process still runs the
# recorded program (a PID is never signalled after it was reused).
pid_of() {
	local name=$1 line pid exe
	[ -f "$PIDS" ] || return 1
	line=$(grep "^$name " "$PIDS" | tail -n1) || return 1
	pid=$(echo "$line" | cut -d' ' -f2)
	exe=$(echo "$line" | cut -d' ' -f3)
	[ -r "/proc/$pid/cmdline" ] || return 1
	tr '\0' '\n' <"/proc/$pid/cmdline" | head -n1 | grep -qxF "$exe" || return 1
	echo "$pid"
}

# stop_proc NAME...: SIGTERM to each, then SIGKILL to those still running
# after 15 s.
stop_proc() {
	local name pid pids=() i
	for name in "$@"; do
		pid=$(pid_of "$name") || continue
		kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
	done
	for ((i = 0; i < 150; i++)); do
		local alive=0
		for pid in ${pids[@]+"${pids[@]}"}; do [ -d "/proc/$pid" ] && alive=1; done
		[ $alive -eq 1 ] || return 0
		sleep 0.1
	done
	for pid in ${pids[@]+"${pids[@]}"}; do
		if [ -d "/proc/$pid" ]; then
			note "pid $pid did not stop within 15s: SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	done
}

# converged_count: how many demo devices the hub reports converged.
converged_count() {
	fleet get devices -l demo=fleet -o json 2>/dev/null | grep -Ec '"converged": *true' || true
}
all_converged() { [ "$(converged_count)" = "${#DEVICES[@]}" ]; }
device_json() { fleet get device "$1" -o json; }

# restarts_of DEVICE POD: the restart count the hub reports for POD on
# DEVICE (the RESTARTS column of `fleet describe deployment POD`).
restarts_of() {
	local n
	n=$(fleet describe deployment "$2" | awk -v d="$1" '$1 == d && $5 ~ /^[0-9]+$/ { print $5 }')
	echo "${n:-0}"
}

ctr_() { ctr -a "$(socket_path)" "$@"; }

install_deps() {
	local missing=()
	for b in containerd containerd-shim-runc-v2 runc ctr; do
		command -v "$b" >/dev/null 2>&1 || missing+=("$b")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and no apt-get: install containerd and runc yourself"
		say "Installing containerd and runc (missing: ${missing[*]})"
		mkdir -p "$LOGS"
		# No recommends: containerd's (criu and its Python) are not needed
		# and double the download. dpkg's chatter goes to a log.
		if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends containerd runc; } >"$LOGS/apt.log" 2>&1; then
			tail -n 20 "$LOGS/apt.log" >&2
			die "apt-get install containerd runc failed; the whole log is $LOGS/apt.log"
		fi
		note "installed: $(containerd --version 2>/dev/null | cut -d' ' -f1,3), $(runc --version 2>/dev/null | head -n1)"
	fi
	for b in setsid awk; do
		command -v "$b" >/dev/null 2>&1 || die "$b not found (util-linux, mawk)"
	done
}

build() {
	if [ -n "${FLEET_DEMO_BIN:-}" ]; then
		for b in fleet fleet-hub fleet-agent; do
			[ -x "$BIN/$b" ] || die "FLEET_DEMO_BIN=$BIN has no $b"
		done
		note "using the binaries in $BIN"
	else
		command -v go >/dev/null 2>&1 || die "Go is needed to build the binaries (https://go.dev/dl/, the version in go.mod)"
		say "Building fleet, fleet-hub and fleet-agent (make build -> ./bin)"
		make -C "$REPO" --no-print-directory build >/dev/null
	fi
	# The same flags as `make build` (static, -trimpath, grpcnotrace), so the
	# packages it shares with fleet-agent (the containerd client) come from
	# the build cache instead of compiling twice: about 30 s on a fresh
	# machine with two cores.
	(cd "$REPO" && CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -o "$DEMO_DIR/imagebuilder" ./test/demo/imagebuilder)
}

start_containerd() {
	local sock
	sock=$(socket_path)
	mkdir -p "$CTD_DIR/root" "$CTD_DIR/state" "$(dirname "$sock")"
	echo "$sock" >"$DEMO_DIR/socket"
	cat >"$CTD_DIR/config.toml" <<-EOF
		version = 2
		root = "$CTD_DIR/root"
		state = "$CTD_DIR/state"
		disabled_plugins = ["io.containerd.grpc.v1.cri"]
		[grpc]
		  address = "$sock"
		[ttrpc]
		  address = "$sock.ttrpc"
		[plugins."io.containerd.internal.v1.opt"]
		  path = "$CTD_DIR/opt"
	EOF
	say "Starting a private containerd (socket $sock; root and state in ${CTD_DIR#"$REPO"/})"
	start_bg containerd "$(command -v containerd)" --config "$CTD_DIR/config.toml"
	wait_until "containerd" 30 ctr -a "$sock" version
}

free_port() {
	! (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null
}

up() {
	need_root
	if [ -f "$PIDS" ]; then
		for name in $(cut -d' ' -f1 "$PIDS"); do
			pid_of "$name" >/dev/null && die "the demo already runs ($name: pid $(pid_of "$name")); run 'make demo-down' first"
		done
	fi
	install_deps
	for a in "$HTTP_ADDR" "$MQTT_ADDR" "$DISPLAY_ADDR"; do
		free_port "$a" || die "$a is in use: set FLEET_DEMO_HTTP_ADDR / FLEET_DEMO_MQTT_ADDR / FLEET_DEMO_DISPLAY_ADDR, or stop what listens there"
	done
	mkdir -p "$DEMO_DIR/run" "$LOGS" "$DEMO_DIR/agents"
	: >"$PIDS"
	trap 'echo; echo "demo.sh: failed; logs are in $LOGS. Clean up with: make demo-down" >&2' ERR
	build
	start_containerd

	say "Building the demo image $IMAGE locally (no registry) and importing it for each device"
	local nsargs=()
	for d in "${DEVICES[@]}"; do nsargs+=(-namespace "$(ns_of "$d")"); done
	"$DEMO_DIR/imagebuilder" -socket "$(socket_path)" -ref "$IMAGE" "${nsargs[@]}" | sed 's/^/    /'

	say "Starting fleet-hub: API http://$HTTP_ADDR, MQTT $MQTT_ADDR, data in ${DEMO_DIR#"$REPO"/}/hub"
	start_bg hub "$BIN/fleet-hub" --data-dir "$DEMO_DIR/hub" --http-addr "$HTTP_ADDR" --mqtt-addr "$MQTT_ADDR" \
		--https-addr "$HTTPS_ADDR" --mqtts-addr "$MQTTS_ADDR"
	wait_until "the hub's admin.conf" 30 test -s "$FLEET_CONFIG"
	wait_until "the hub API" 30 fleet get devices

	say "Registering three devices (fleet device add NAME --label ...)"
	for d in "${DEVICES[@]}"; do
		mkdir -p "$DEMO_DIR/agents/$d"
		# What fleet device add prints: the token, and the agent's command
		# line, which pins the hub's signing key (without it the agent
		# runs nothing from the broker).
		(umask 077 && fleet device add "$d" --label "role=${ROLE[$d]}" --label demo=fleet >"$DEMO_DIR/agents/$d/added")
		(umask 077 && sed -n 's/^Token (shown once, store it safely): //p' "$DEMO_DIR/agents/$d/added" >"$DEMO_DIR/agents/$d/token")
		sed -n 's/.* --hub-signing-key \([A-Za-z0-9+\/=]*\).*/\1/p' "$DEMO_DIR/agents/$d/added" | head -n 1 >"$DEMO_DIR/agents/$d/hub-signing.key"
		rm -f "$DEMO_DIR/agents/$d/added"
		[ -s "$DEMO_DIR/agents/$d/token" ] || die "no token for $d"
		[ -s "$DEMO_DIR/agents/$d/hub-signing.key" ] || die "no hub signing key for $d"
		note "$d (role=${ROLE[$d]})"
	done

	say "Starting three fleet-agents, one per device, each in its own containerd namespace"
	for d in "${DEVICES[@]}"; do start_agent "$d"; done

	say "Applying fleet-examples/demo: sensor-collector (role=sensor), shop-display (role=display), heartbeat (all)"
	local f
	for f in "$REPO"/fleet-examples/demo/*.yaml; do
		echo "---"
		sed "s/127\.0\.0\.1:18090/$DISPLAY_ADDR/" "$f"
	done | fleet apply -f - | sed 's/^/    /'
	wait_until "every device to converge" 120 all_converged
	for dep in sensor-collector shop-display heartbeat; do wait_until "$dep to roll out" 60 rolled_out "$dep"; done
	note "converged. The hub's view:"
	fleet get devices | sed 's/^/    /'
	echo
	fleet get deployments | sed 's/^/    /'
	note "shop-display on demo-pi-2 answers http://$DISPLAY_ADDR/ with: $(curl -fsS "http://$DISPLAY_ADDR/" 2>/dev/null || echo '(curl not installed)')"

	self_heal
	offline_resync

	dashboard_token

	trap - ERR
	say "The demo keeps running (up in $((SECONDS / 60)) min $((SECONDS % 60)) s). Try:"
	note "export FLEET_CONFIG=$FLEET_CONFIG"
	note "$BIN/fleet get devices -w        # watch the fleet"
	note "$BIN/fleet get pods -o wide      # every pod on every device"
	note "$BIN/fleet events                # what the agents did lately"
	note "$BIN/fleet describe device demo-pi-1   # its pods, then its events"
	note "$BIN/fleet rollout status deployment/heartbeat"
	note "ctr -a $(socket_path) -n fleet-demo-pi-1 tasks ls"
	note "logs: $LOGS; PIDs: $PIDS"
	note "stop and clean everything: make demo-down"
	say "The dashboard, live in a browser: http://$HTTP_ADDR/"
	note "sign in with this read-only (monitor) token: $(cat "$DEMO_DIR/dashboard-token")"
	note "the admin token, which may also pause, undo and restart rollouts, is in $FLEET_CONFIG"
}

# dashboard_token: a read-only credential for the dashboard, its token
# kept in $DEMO_DIR/dashboard-token (0600).
dashboard_token() {
	(umask 077 && fleet monitor add demo-dashboard -o json |
		sed -n 's/.*"token": *"\([^"]*\)".*/\1/p' >"$DEMO_DIR/dashboard-token")
	[ -s "$DEMO_DIR/dashboard-token" ] || die "no dashboard token"
}

start_agent() {
	local d=$1
	mkdir -p "$DEMO_DIR/agents/$d/state"
	start_bg "agent-$d" "$BIN/fleet-agent" --device "$d" --broker "tcp://$MQTT_ADDR" \
		--token-file "$DEMO_DIR/agents/$d/token" --hub-signing-key "@$DEMO_DIR/agents/$d/hub-signing.key" \
		--state-dir "$DEMO_DIR/agents/$d/state" \
		--containerd-socket "$(socket_path)" --namespace "$(ns_of "$d")" --resync-interval 5s
	note "fleet-agent --device $d (namespace $(ns_of "$d"), pid $(pid_of "agent-$d"))"
}

self_heal() {
	local d=demo-pi-1 ns id before
	ns=$(ns_of "$d")
	say "Self-healing: killing sensor-collector's process on $d behind Fleet's back"
	id=$(ctr_ -n "$ns" containers ls -q 'labels."fleet.pod"==sensor-collector' | head -n1)
	[ -n "$id" ] || die "no sensor-collector container on $d"
	before=$(restarts_of "$d" sensor-collector)
	ctr_ -n "$ns" tasks kill -s SIGKILL "$id"
	note "ctr tasks kill -s SIGKILL $id  (restarts so far: $before)"
	note "the agent sees the exit and restarts it (restartPolicy Always, after a 10 s back-off)..."
	wait_until "the restart count of sensor-collector on $d to go up" 90 restarted "$d" "$before"
	wait_until "$d to converge again" 60 all_converged
	note "running again; the hub counts the restart (fleet describe deployment sensor-collector):"
	fleet describe deployment sensor-collector | sed -n '/^Devices:/,$p' | sed 's/^/    /'
}
restarted() { [ "$(restarts_of "$1" sensor-collector)" -gt "$2" ]; }

offline_resync() {
	local d=demo-pi-3
	say "Offline resync: stopping $d's agent (its containers keep running), then changing heartbeat"
	stop_proc "agent-$d"
	wait_until "$d to show offline" 30 offline "$d"
	sed 's/"heartbeat"/"heartbeat v2"/' "$REPO/fleet-examples/demo/30-heartbeat.yaml" | fleet apply -f - | sed 's/^/    /'
	wait_until "the online devices to converge" 60 converged_online
	# The deployment's counts follow the devices' reports within a second.
	wait_until "heartbeat to count the two updated devices" 30 updated_count heartbeat 2
	note "the hub has published $d's new desired state (retained on MQTT) while $d is away;"
	note "the others run the change already, $d still runs the old pod:"
	fleet get devices | sed 's/^/    /'
	echo
	fleet get deployment heartbeat | sed 's/^/    /'
	say "Starting $d's agent again: it receives the retained desired state on connect and converges"
	start_agent "$d"
	wait_until "every device to converge" 120 all_converged
	wait_until "the heartbeat change to reach every device" 60 rolled_out heartbeat
	fleet get devices | sed 's/^/    /'
	echo
	fleet get deployments | sed 's/^/    /'
}
# converged_online: the two devices that stayed online converged.
converged_online() {
	[ "$(fleet get devices -l demo=fleet | awk '$2 == "true" && $6 == "true"' | wc -l)" = 2 ]
}
# updated_count NAME N: N devices run NAME's current template, ready.
updated_count() {
	fleet get deployment "$1" | awk -v n="$2" 'NR == 2 { exit !($3 == n && $4 == n) }'
}
# rolled_out NAME: every targeted device runs the deployment's current
# template and is ready.
rolled_out() {
	fleet get deployment "$1" | awk 'NR == 2 { exit !($2 == $3 && $3 == $4 && $5 == 0) }'
}
offline() { device_json "$1" | tr -d ' \n' | grep -q '"online":false'; }

status() {
	[ -f "$PIDS" ] || {
		echo "the demo is not running"
		return 0
	}
	local name
	for name in $(cut -d' ' -f1 "$PIDS"); do
		if pid=$(pid_of "$name"); then echo "$name: pid $pid"; else echo "$name: not running"; fi
	done
	if pid_of hub >/dev/null; then
		fleet get devices
		echo "dashboard: http://$HTTP_ADDR/ (read-only token in $DEMO_DIR/dashboard-token)"
	fi
}

down() {
	need_root
	local sock name pid
	sock=$(socket_path)
	say "Stopping the demo in ${DEMO_DIR}"
	# Agents first (stopping an agent never stops its containers), then the
	# hub.
	if [ -f "$PIDS" ]; then
		# shellcheck disable=SC2046 # names have no spaces
		stop_proc $(grep '^agent-' "$PIDS" | cut -d' ' -f1)
		stop_proc hub
	fi
	# Every task, container and snapshot, while containerd still runs.
	if pid_of containerd >/dev/null && ctr -a "$sock" version >/dev/null 2>&1; then
		local ns ids id
		for ns in $(ctr -a "$sock" namespaces ls -q); do
			ids=$(ctr -a "$sock" -n "$ns" tasks ls -q 2>/dev/null || true)
			for id in $ids; do ctr -a "$sock" -n "$ns" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true; done
			for id in $ids; do
				# A killed task takes a moment to be reaped.
				for _ in $(seq 50); do
					ctr -a "$sock" -n "$ns" tasks rm -f "$id" >/dev/null 2>&1 && break
					sleep 0.1
				done
			done
			for id in $(ctr -a "$sock" -n "$ns" containers ls -q 2>/dev/null || true); do
				ctr -a "$sock" -n "$ns" containers rm "$id" >/dev/null 2>&1 || note "could not remove container $ns/$id"
			done
			for id in $(ctr -a "$sock" -n "$ns" images ls -q 2>/dev/null || true); do
				ctr -a "$sock" -n "$ns" images rm "$id" >/dev/null 2>&1 || true
			done
			note "namespace $ns: tasks, containers and images removed"
		done
	fi
	stop_proc containerd
	# Shims serving our containerd, should any task have resisted.
	local p
	for p in /proc/[0-9]*; do
		if tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -q "containerd-shim.* -address $sock "; then
			kill -KILL "${p#/proc/}" 2>/dev/null || true
		fi
	done
	# Mounts left under the demo's directories, deepest first.
	local mp
	for mp in $(awk -v a="$DEMO_DIR/" -v b="$(dirname "$sock")/" 'index($5, a) == 1 || index($5, b) == 1 { print length($5), $5 }' /proc/self/mountinfo | sort -rn | cut -d' ' -f2); do
		umount -l "$mp" 2>/dev/null || note "could not unmount $mp"
	done
	for d in "${DEVICES[@]}"; do
		for p in /sys/fs/cgroup/*/"$(ns_of "$d")" /sys/fs/cgroup/"$(ns_of "$d")"; do
			[ -d "$p" ] && rmdir "$p" 2>/dev/null || true
		done
	done
	rm -rf "$DEMO_DIR"
	case $sock in /run/fleet-demo-*) rm -rf "$(dirname "$sock")" ;; esac

	# Nothing may be left: no process, container (shim) or mount.
	local left=0
	for p in /proc/[0-9]*; do
		if tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF -e "$DEMO_DIR/" -e "$sock"; then
			note "still running: pid ${p#/proc/}: $(tr '\0' ' ' <"$p/cmdline")"
			left=1
		fi
	done
	if awk -v a="$DEMO_DIR/" 'index($5, a) == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo; then
		note "still mounted under $DEMO_DIR"
		left=1
	fi
	[ $left -eq 0 ] || die "the demo left something behind (see above)"
	note "stopped: no demo process, container or mount is left"
}

case ${1:-} in
up) up ;;
down) down ;;
status) status ;;
*)
	echo "usage: $0 up|status|down" >&2
	exit 2
	;;
esac
