#!/bin/sh
# Installs (or removes) Fleet's edge agent on a Raspberry Pi OS / Debian
# device: containerd and runc (apt-get, when missing), the fleet-agent binary
# matching this CPU, /etc/fleet/agent.yaml, the device token and the systemd
# unit, which it enables and starts. Run it as root; `--help` for options.
#
# Idempotent: a second run with the same options changes nothing. Every file
# it writes is listed in /etc/fleet/.installed-files, and --uninstall removes
# exactly those (plus the directories it created, when empty), never
# containerd, and the agent's state only with --purge.
#
# With --root DIR it acts inside DIR (every path is prefixed with DIR) and
# runs nothing on the host: apt-get and systemctl commands are printed as
# "would run: ...", and what `systemctl enable` does (the wants/ symlink) is
# done inside DIR. The memory-cgroup check then reads DIR/proc/cgroups and
# DIR/sys/fs/cgroup/cgroup.controllers. --dry-run writes nothing at all.
#
# Exit status: 0 done, 1 error, 2 bad usage, 3 memory cgroup disabled.
set -eu

PROG=install.sh
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH
umask 077

HERE=$(cd "$(dirname "$0")" && pwd)

BIN_PATH=/usr/local/bin/fleet-agent
LIB_DIR=/usr/local/lib/fleet-agent
ETC_DIR=/etc/fleet
CONF_PATH=/etc/fleet/agent.yaml
TOKEN_PATH=/etc/fleet/token
BOOTSTRAP_PATH=/etc/fleet/bootstrap-token
JOIN_PATH=/etc/fleet/join
CA_PATH=/etc/fleet/ca.pem
MANIFEST=/etc/fleet/.installed-files
UNIT_NAME=fleet-agent.service
UNIT_PATH=/etc/systemd/system/fleet-agent.service
WANTS_PATH=/etc/systemd/system/multi-user.target.wants/fleet-agent.service

usage() {
	cat <<'EOF'
Usage:
  install.sh --join STRING|@FILE [--name-from SOURCE]
  install.sh --broker URL[,URL...] --device NAME (--token TOKEN | --token-file FILE)
  install.sh --broker URL[,URL...] --bootstrap-token-file FILE [--name-from SOURCE]
             [--device NAME]
             [--ca FILE] [--ca-hash HASH] [--binary PATH | --url-base URL]
             [--arch ARCH]
             [--state-dir DIR] [--containerd-socket PATH] [--namespace NS]
             [--root DIR] [--dry-run]
  install.sh --uninstall [--purge] [--root DIR] [--dry-run]

Install options:
  --join STRING|@FILE   the join string fleet device add or fleet token
                        create prints (fleetjoin1:...), or a file holding
                        it: the broker, the hub's CA hash and signing key,
                        the device's name and token (or a bootstrap token).
                        Kept as /etc/fleet/join (0600); leave out the
                        options it carries (--broker, --device, --token*,
                        --bootstrap-token-file, --ca-hash)
  --broker URL[,URL...] MQTT broker: ssl://host:8883 (the hub's TLS
                        listener), tcp://host:1883, ...; several hubs:
                        every hub's broker, comma-separated, the preferred
                        first (ssl://h1:8883,ssl://h2:8883): the agent
                        connects to the first that accepts it and moves
                        to the next when one is lost or refuses it
  --device NAME         this device's name (a DNS label: a-z, 0-9, '-')
  --token TOKEN         device token (visible in `ps`; prefer --token-file)
  --token-file FILE     file holding the device token
  --bootstrap-token-file FILE
                        enroll on first start with this bootstrap token
                        (fleet token create) instead of a device token; the
                        agent saves its own token and never uses it again
  --name-from SOURCE    with a bootstrap token and no --device: name the
                        device after its hostname (default), serial (the
                        board's serial number) or machine-id
  --ca FILE             CA certificate (PEM) of a TLS broker: the only CA the
                        agent trusts (the hub's is ca.crt in its data dir)
  --ca-hash HASH        pin the hub's CA by hash (sha256:..., printed by
                        fleet token create and fleet device add beside the
                        token, which does not carry it): the agent verifies
                        the broker by it on first contact and keeps that CA.
                        Without --join the agent has no hub signing key and
                        runs nothing the hub publishes: prefer --join
  --binary PATH         fleet-agent binary to install (default: the one for
                        this CPU in dist/ next to this script, or ../dist/),
                        as /usr/local/lib/fleet-agent/<release> with a
                        current link, which /usr/local/bin/fleet-agent
                        names: the agent upgrades itself there
  --url-base URL        download fleet-agent-linux-ARCH and SHA256SUMS from
                        URL/ (curl or wget) and verify the checksum
  --arch ARCH           arm64, armv7, armv6 or amd64 (default: from uname -m)
  --state-dir DIR       agent state directory (default /var/lib/fleet-agent)
  --containerd-socket P containerd socket (default /run/containerd/containerd.sock)
  --namespace NS        containerd namespace (default fleet)

Uninstall options:
  --uninstall           remove what install wrote (binary, unit and its
                        enable symlink, /etc/fleet files) and the agent's
                        releases in /usr/local/lib/fleet-agent; containerd
                        and the agent's state stay
  --purge               also remove the agent's state directory

Common options:
  --root DIR            act inside DIR; run no apt-get/systemctl, print them
  --dry-run             print what would change; change nothing
  -h, --help            this help
EOF
}

say() { printf '%s\n' "$*"; }
warn() { printf '%s: warning: %s\n' "$PROG" "$*" >&2; }
die() {
	printf '%s: %s\n' "$PROG" "$*" >&2
	exit 1
}
usage_error() {
	printf '%s: %s (see --help)\n' "$PROG" "$*" >&2
	exit 2
}

BROKER='' BROKER_TLS='' DEVICE='' TOKEN='' TOKEN_FILE='' CA='' CA_HASH='' BINARY='' URL_BASE='' ARCH=''
BOOTSTRAP_FILE='' NAME_FROM='' JOIN=''
STATE_DIR=/var/lib/fleet-agent
SOCKET=/run/containerd/containerd.sock
NAMESPACE=fleet
ROOT='' DRY_RUN=0 UNINSTALL=0 PURGE=0
TOKEN_SET=0

need_value() {
	[ "$2" -ge 2 ] || usage_error "$1 needs a value"
}

while [ $# -gt 0 ]; do
	case $1 in
	--*=*)
		opt=${1%%=*} val=${1#*=}
		shift
		set -- "$opt" "$val" "$@"
		continue
		;;
	esac
	case $1 in
	--join) need_value "$1" $# && JOIN=$2 && shift ;;
	--broker) need_value "$1" $# && BROKER=$2 && shift ;;
	--device) need_value "$1" $# && DEVICE=$2 && shift ;;
	--token) need_value "$1" $# && TOKEN=$2 && TOKEN_SET=1 && shift ;;
	--token-file) need_value "$1" $# && TOKEN_FILE=$2 && shift ;;
	--bootstrap-token-file) need_value "$1" $# && BOOTSTRAP_FILE=$2 && shift ;;
	--name-from) need_value "$1" $# && NAME_FROM=$2 && shift ;;
	--ca) need_value "$1" $# && CA=$2 && shift ;;
	--ca-hash) need_value "$1" $# && CA_HASH=$2 && shift ;;
	--binary) need_value "$1" $# && BINARY=$2 && shift ;;
	--url-base) need_value "$1" $# && URL_BASE=${2%/} && shift ;;
	--arch) need_value "$1" $# && ARCH=$2 && shift ;;
	--state-dir) need_value "$1" $# && STATE_DIR=$2 && shift ;;
	--containerd-socket) need_value "$1" $# && SOCKET=$2 && shift ;;
	--namespace) need_value "$1" $# && NAMESPACE=$2 && shift ;;
	--root) need_value "$1" $# && ROOT=$2 && shift ;;
	--dry-run) DRY_RUN=1 ;;
	--uninstall) UNINSTALL=1 ;;
	--purge) PURGE=1 ;;
	-h | --help)
		usage
		exit 0
		;;
	*) usage_error "unknown argument: $1" ;;
	esac
	shift
done

# --- paths and modes --------------------------------------------------------

if [ -n "$ROOT" ]; then
	[ -d "$ROOT" ] || usage_error "--root $ROOT is not a directory"
	ROOT=$(cd "$ROOT" && pwd)
	[ "$ROOT" != / ] || usage_error "--root / is the host itself; leave --root out"
fi

# r PATH: where the host path PATH is in the target root.
r() { printf '%s%s' "$ROOT" "$1"; }

# acting: true when commands really run on this host.
acting() { [ -z "$ROOT" ] && [ "$DRY_RUN" = 0 ]; }

# run CMD...: runs CMD on the host, or prints it under --root/--dry-run.
run() {
	if acting; then
		say "+ $*"
		"$@"
	else
		say "would run: $*"
	fi
}

TMPD=$(mktemp -d)
trap 'rm -rf "$TMPD"' EXIT
RECORDS=$TMPD/records
: >"$RECORDS"

# record KIND PATH: notes a file (f), symlink (l) or directory (d) this
# install owns, for the manifest.
record() { printf '%s %s\n' "$1" "$2" >>"$RECORDS"; }

file_mode() { stat -c %a "$1"; }

# ensure_dir DIR MODE: creates DIR (mode MODE) and its missing parents
# (0755) inside the root, recording each directory it creates.
ensure_dir() {
	_missing=
	_d=$1
	while [ "$_d" != / ] && [ ! -d "$(r "$_d")" ]; do
		_missing="$_d $_missing"
		_d=$(dirname "$_d")
	done
	for _d in $_missing; do
		record d "$_d"
		if [ "$DRY_RUN" = 1 ]; then
			say "would create $_d/"
			continue
		fi
		mkdir "$(r "$_d")"
		if [ "$_d" = "$1" ]; then chmod "$2" "$(r "$_d")"; else chmod 0755 "$(r "$_d")"; fi
		say "created $_d/"
	done
}

# put_file SRC DEST MODE: installs SRC as DEST (a host path) with MODE,
# atomically, unless DEST already has that content and mode. Sets LAST to 1
# when it wrote DEST, else 0, and CHANGED to 1 once any file was written.
CHANGED=0 LAST=0
put_file() {
	_dest=$(r "$2")
	record f "$2"
	if [ -f "$_dest" ] && [ ! -L "$_dest" ] && cmp -s "$1" "$_dest" && [ "$(file_mode "$_dest")" = "${3#0}" ]; then
		say "unchanged $2"
		LAST=0
		return 0
	fi
	CHANGED=1 LAST=1
	if [ "$DRY_RUN" = 1 ]; then
		say "would write $2 (mode $3)"
		return 0
	fi
	ensure_dir "$(dirname "$2")" 0755
	_tmp=$(mktemp "$_dest.XXXXXX")
	cat "$1" >"$_tmp"
	chmod "$3" "$_tmp"
	mv -f "$_tmp" "$_dest"
	say "wrote $2 (mode $3)"
}

# put_link TARGET LINK: makes LINK (a host path) a symlink to TARGET,
# atomically (a new link renamed over the old one or over a file), unless
# it is one already.
put_link() {
	_link=$(r "$2")
	record l "$2"
	if [ -L "$_link" ] && [ "$(readlink "$_link")" = "$1" ]; then
		say "unchanged $2"
		return 0
	fi
	CHANGED=1
	if [ "$DRY_RUN" = 1 ]; then
		say "would link $2 -> $1"
		return 0
	fi
	ensure_dir "$(dirname "$2")" 0755
	rm -f "$_link.new"
	ln -s "$1" "$_link.new"
	mv -fT "$_link.new" "$_link"
	say "linked $2 -> $1"
}

# remove_path PATH: removes a file or symlink inside the root.
remove_path() {
	_p=$(r "$1")
	if [ -e "$_p" ] || [ -L "$_p" ]; then
		if [ "$DRY_RUN" = 1 ]; then
			say "would remove $1"
		else
			rm -f "$_p"
			say "removed $1"
		fi
	fi
}

# --- architecture and binary ------------------------------------------------

detect_arch() {
	_m=$(uname -m)
	case $_m in
	aarch64 | arm64)
		# A 32-bit Raspberry Pi OS on a 64-bit kernel reports aarch64;
		# match the userland (and its containerd) instead.
		if [ -z "$ROOT" ] && command -v dpkg >/dev/null 2>&1 && [ "$(dpkg --print-architecture)" = armhf ]; then
			echo armv7
		else
			echo arm64
		fi
		;;
	armv8l | armv7l) echo armv7 ;;
	armv6l) echo armv6 ;;
	x86_64 | amd64) echo amd64 ;;
	*) die "unsupported machine $_m (uname -m); pass --arch and --binary" ;;
	esac
}

# elf_machine FILE: prints the ELF e_machine number of FILE, or nothing.
elf_machine() {
	[ "$(od -An -N 4 -t x1 "$1" | tr -d ' \n')" = 7f454c46 ] || return 0
	od -An -j 18 -N 2 -t u2 "$1" | tr -d ' \n'
}

check_binary_arch() {
	case $ARCH in
	arm64) _want=183 ;;
	armv6 | armv7) _want=40 ;;
	amd64) _want=62 ;;
	esac
	_got=$(elf_machine "$1")
	[ -n "$_got" ] || die "$1 is not an ELF executable"
	[ "$_got" = "$_want" ] || die "$1 is not a $ARCH binary (ELF machine $_got, want $_want); pass --arch or the right --binary"
}

# verify_sum FILE NAME SUMS: checks FILE against NAME's line in SUMS.
verify_sum() {
	_want=$(awk -v n="$2" '$2 == n || $2 == "*" n { print $1; exit }' "$3")
	[ -n "$_want" ] || die "$3 has no checksum for $2"
	_got=$(sha256sum <"$1" | cut -d ' ' -f 1)
	[ "$_got" = "$_want" ] || die "checksum mismatch for $2: got $_got, $3 says $_want"
	say "checksum ok: $2"
}

fetch() {
	if command -v curl >/dev/null 2>&1; then
		curl -fsSL --retry 3 -o "$2" "$1" || die "download $1 failed"
	elif command -v wget >/dev/null 2>&1; then
		wget -q -O "$2" "$1" || die "download $1 failed"
	else
		die "--url-base needs curl or wget"
	fi
}

# find_binary: prints the path of the agent binary to install.
find_binary() {
	_name=fleet-agent-linux-$ARCH
	if [ -n "$BINARY" ]; then
		[ -f "$BINARY" ] || die "--binary $BINARY: no such file"
		printf '%s' "$BINARY"
		return 0
	fi
	if [ -n "$URL_BASE" ]; then
		fetch "$URL_BASE/$_name" "$TMPD/$_name"
		fetch "$URL_BASE/SHA256SUMS" "$TMPD/SHA256SUMS"
		verify_sum "$TMPD/$_name" "$_name" "$TMPD/SHA256SUMS" >&2
		printf '%s' "$TMPD/$_name"
		return 0
	fi
	for _d in "$HERE/dist" "$HERE/../dist"; do
		if [ -f "$_d/$_name" ]; then
			if [ -f "$_d/SHA256SUMS" ]; then
				verify_sum "$_d/$_name" "$_name" "$_d/SHA256SUMS" >&2
			fi
			printf '%s' "$_d/$_name"
			return 0
		fi
	done
	die "no $_name in $HERE/dist or $HERE/../dist (run 'make arm', or pass --binary or --url-base)"
}

find_unit() {
	if [ -f "$HERE/$UNIT_NAME" ]; then
		printf '%s' "$HERE/$UNIT_NAME"
	elif [ -n "$URL_BASE" ]; then
		fetch "$URL_BASE/$UNIT_NAME" "$TMPD/$UNIT_NAME"
		printf '%s' "$TMPD/$UNIT_NAME"
	else
		die "no $UNIT_NAME next to $0"
	fi
}

# binary_name BIN: BIN's name in $LIB_DIR: its release, as `fleet-agent
# version` prints it, when it runs here; else "installed" (a binary for
# another machine, under --root).
binary_name() {
	_t=
	if command -v timeout >/dev/null 2>&1; then _t="timeout 10"; fi
	_v=$($_t "$1" version 2>/dev/null | awk '$1 == "fleet-agent" { print $2; exit }') || _v=
	if printf '%s' "$_v" | grep -Eq '^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$'; then
		printf '%s' "$_v"
	else
		printf installed
	fi
}

# install_binary BIN: the upgrade layout the agent replaces itself in
# (edgeagent/selfupdate): BIN as $LIB_DIR/<release>, $LIB_DIR/current
# linked to it, and $BIN_PATH, which the unit runs, linked to current.
# The agent tries a new release as $LIB_DIR/next and renames next over
# current only once it connected and reported, so every start (a power
# cut at any moment, a crash) runs a binary that worked.
install_binary() {
	_name=$(binary_name "$1")
	ensure_dir "$LIB_DIR" 0755
	put_file "$1" "$LIB_DIR/$_name" 0755
	put_link "$_name" "$LIB_DIR/current"
	put_link "$LIB_DIR/current" "$BIN_PATH"
}

# --- checks -----------------------------------------------------------------

# check_memory_cgroup: containerd needs the memory controller for memory
# limits; Raspberry Pi kernels ship with it disabled on older releases.
check_memory_cgroup() {
	_v2=$(r /sys/fs/cgroup/cgroup.controllers)
	_v1=$(r /proc/cgroups)
	if [ -f "$_v2" ]; then
		if grep -qw memory "$_v2"; then
			say "memory cgroup: enabled (cgroup v2)"
			return 0
		fi
	elif [ -f "$_v1" ]; then
		if [ "$(awk '$1 == "memory" { print $4 }' "$_v1")" = 1 ]; then
			say "memory cgroup: enabled (cgroup v1)"
			return 0
		fi
	elif [ -n "$ROOT" ]; then
		warn "no proc/cgroups or sys/fs/cgroup/cgroup.controllers under $ROOT: memory cgroup not checked"
		return 0
	else
		die "neither /sys/fs/cgroup/cgroup.controllers nor /proc/cgroups exists: is /proc mounted?"
	fi
	_cmdline=/boot/firmware/cmdline.txt
	if [ ! -f "$(r /boot/firmware/cmdline.txt)" ] && [ -f "$(r /boot/cmdline.txt)" ]; then
		_cmdline=/boot/cmdline.txt
	fi
	cat >&2 <<EOF
$PROG: the memory cgroup is not enabled; containerd needs it to run containers
with memory limits. To enable it, append

    cgroup_enable=memory cgroup_memory=1

to the end of the single line in $_cmdline (on releases before
Bookworm the file is /boot/cmdline.txt; keep it one line), for example:

    sudo sed -i '1 s/\$/ cgroup_enable=memory cgroup_memory=1/' $_cmdline

then reboot (sudo reboot) and run this script again. If the line contains
cgroup_disable=memory, remove that word.
EOF
	exit 3
}

install_packages() {
	_missing=
	if [ -n "$ROOT" ]; then
		[ -x "$(r /usr/bin/containerd)" ] || _missing=containerd
		[ -x "$(r /usr/sbin/runc)" ] || [ -x "$(r /usr/bin/runc)" ] || _missing="$_missing runc"
	else
		command -v containerd >/dev/null 2>&1 || _missing=containerd
		command -v runc >/dev/null 2>&1 || _missing="$_missing runc"
	fi
	if [ -z "$_missing" ]; then
		say "containerd and runc: installed"
		return 0
	fi
	if [ "$ARCH" = armv6 ] && ! grep -qs '^ID=raspbian' "$(r /etc/os-release)"; then
		warn "Debian's armhf containerd and runc are ARMv7 builds and do not run on an ARMv6 Pi (Zero, 1); use Raspberry Pi OS, whose armhf packages are ARMv6 (see arm/CONTAINERD.md)"
	fi
	if acting && ! command -v apt-get >/dev/null 2>&1; then
		die "containerd/runc missing and no apt-get: install them, then run this again"
	fi
	run apt-get update
	# shellcheck disable=SC2086 # _missing is a list of package names
	run env DEBIAN_FRONTEND=noninteractive apt-get install -y $_missing
	if acting; then
		containerd --version >/dev/null 2>&1 || die "the installed containerd does not run on this CPU (ARMv6 with Debian's ARMv7 packages? see arm/CONTAINERD.md)"
	fi
}

# --- config -----------------------------------------------------------------

# yq VALUE: VALUE as a single-quoted YAML scalar.
yq() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/''/g")"; }

nl='
'
check_value() {
	case $2 in
	*"$nl"*) usage_error "$1 must be a single line" ;;
	esac
}

check_abs() {
	case $2 in
	/*) ;;
	*) usage_error "$1 must be an absolute path" ;;
	esac
	case $2 in
	*[[:space:]]*) usage_error "$1 must not contain spaces" ;;
	esac
}

write_config() {
	{
		say "# Written by fleet's install.sh; run it again to change this file."
		say "# Keys are fleet-agent's flags (fleet-agent --help)."
		if [ -n "$JOIN" ]; then
			say "join: $(yq "@$JOIN_PATH")"
			if [ -n "$NAME_FROM" ]; then say "name-from: $(yq "$NAME_FROM")"; fi
		fi
		if [ -n "$BROKER" ]; then say "broker: $(yq "$BROKER")"; fi
		if [ -n "$DEVICE" ]; then say "device: $(yq "$DEVICE")"; fi
		if [ -n "$JOIN" ]; then
			:
		elif [ -n "$BOOTSTRAP_FILE" ]; then
			say "bootstrap-token-file: $(yq "$BOOTSTRAP_PATH")"
			if [ -n "$NAME_FROM" ]; then say "name-from: $(yq "$NAME_FROM")"; fi
		else
			say "token-file: $(yq "$TOKEN_PATH")"
		fi
		if [ -n "$CA" ]; then say "ca: $(yq "$CA_PATH")"; fi
		if [ -n "$CA_HASH" ]; then say "ca-hash: $(yq "$CA_HASH")"; fi
		say "state-dir: $(yq "$STATE_DIR")"
		say "containerd-socket: $(yq "$SOCKET")"
		say "namespace: $(yq "$NAMESPACE")"
	} >"$TMPD/agent.yaml"
	put_file "$TMPD/agent.yaml" "$CONF_PATH" 0600
}

# enable_unit: what `systemctl enable` does for WantedBy=multi-user.target,
# done inside --root.
enable_unit() {
	_link=$(r "$WANTS_PATH")
	record l "$WANTS_PATH"
	if [ -L "$_link" ] && [ "$(readlink "$_link")" = "$UNIT_PATH" ]; then
		say "unchanged $WANTS_PATH"
		return 0
	fi
	if [ "$DRY_RUN" = 1 ]; then
		say "would link $WANTS_PATH -> $UNIT_PATH"
		return 0
	fi
	ensure_dir "$(dirname "$WANTS_PATH")" 0755
	ln -sfn "$UNIT_PATH" "$_link"
	say "linked $WANTS_PATH -> $UNIT_PATH"
}

# write_manifest: the union of what this run wrote and what earlier runs
# recorded; files an earlier run wrote and this one no longer does (a CA
# dropped from the options) are removed.
write_manifest() {
	_old=$(r "$MANIFEST")
	: >"$TMPD/manifest"
	if [ -f "$_old" ]; then
		while read -r _kind _path; do
			[ -n "$_path" ] || continue
			if [ "$_kind" = f ] && ! grep -qxF "f $_path" "$RECORDS" && ! grep -qxF "l $_path" "$RECORDS"; then
				remove_path "$_path"
				continue
			fi
			printf '%s %s\n' "$_kind" "$_path" >>"$TMPD/manifest"
		done <"$_old"
	fi
	cat "$RECORDS" >>"$TMPD/manifest"
	sort -u "$TMPD/manifest" >"$TMPD/manifest.sorted"
	if [ -f "$_old" ] && cmp -s "$TMPD/manifest.sorted" "$_old"; then
		return 0
	fi
	if [ "$DRY_RUN" = 1 ]; then
		say "would write $MANIFEST"
		return 0
	fi
	_tmp=$(mktemp "$_old.XXXXXX")
	cat "$TMPD/manifest.sorted" >"$_tmp"
	chmod 0600 "$_tmp"
	mv -f "$_tmp" "$_old"
}

# --- install ----------------------------------------------------------------

# check_join: the join string is one word of the known format; the agent
# decodes it and names any member that is wrong. Options it carries are
# refused beside it.
check_join() {
	case $JOIN in
	@*)
		_f=${JOIN#@}
		[ -r "$_f" ] || die "--join $JOIN: not readable"
		JOIN=$(tr -d '[:space:]' <"$_f")
		;;
	esac
	for _o in "--broker:$BROKER" "--device:$DEVICE" "--token:$TOKEN$TOKEN_FILE" "--bootstrap-token-file:$BOOTSTRAP_FILE" "--ca-hash:$CA_HASH"; do
		[ -z "${_o#*:}" ] || usage_error "${_o%%:*}: the join string carries it; leave it out"
	done
	check_value --join "$JOIN"
	case $JOIN in
	fleetjoin1:?*) ;;
	fleetjoin*:*) usage_error "--join: a join string of a format this install.sh does not know (it reads fleetjoin1:): use the install.sh of the same release as the fleet CLI" ;;
	*) usage_error "--join: not a join string: want fleetjoin1:... as fleet device add or fleet token create prints it (the whole line)" ;;
	esac
	case ${JOIN#fleetjoin1:} in
	*[!A-Za-z0-9_-]*) usage_error "--join: not base64url after fleetjoin1: (cut short, wrapped or mistyped?)" ;;
	esac
	case $NAME_FROM in
	'' | hostname | serial | machine-id) ;;
	*) usage_error "--name-from $NAME_FROM: want hostname, serial or machine-id" ;;
	esac
	if [ -n "$CA" ]; then [ -r "$CA" ] || die "--ca $CA: not readable"; fi
}

# check_brokers: --broker is one URL or several, comma-separated; each
# must be a broker URL (an error names its position). BROKER_TLS is set to
# all, none or some: a CA (--ca, --ca-hash) must cover every broker.
check_brokers() {
	check_value --broker "$BROKER"
	_n=$(printf '%s' "$BROKER" | awk -F, '{ print NF }')
	_i=0 _tls=0
	_rest=$BROKER,
	while [ -n "$_rest" ]; do
		_b=${_rest%%,*}
		_rest=${_rest#*,}
		_i=$((_i + 1))
		case $_b in
		'') usage_error "--broker: broker $_i of $_n is empty (a stray comma?)" ;;
		ssl://?* | tls://?* | mqtts://?*) _tls=$((_tls + 1)) ;;
		tcp://?* | mqtt://?*) ;;
		*) usage_error "--broker: broker $_i of $_n, $_b: want tcp://, mqtt://, ssl://, tls:// or mqtts:// and a host" ;;
		esac
	done
	if [ "$_tls" -eq "$_i" ]; then
		BROKER_TLS=all
	elif [ "$_tls" -eq 0 ]; then
		BROKER_TLS=none
	else
		BROKER_TLS=some
	fi
}

# check_credentials: the options of an install without --join.
check_credentials() {
	[ -n "$BROKER" ] || usage_error "--broker is required (or --join)"
	[ -n "$DEVICE" ] || [ -n "$BOOTSTRAP_FILE" ] || usage_error "--device is required (or --bootstrap-token-file)"
	check_brokers
	if [ -n "$DEVICE" ] && ! printf '%s' "$DEVICE" | grep -Eq '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'; then
		usage_error "--device $DEVICE: want a DNS label (a-z, 0-9 and '-', at most 63)"
	fi
	if [ "$TOKEN_SET" = 1 ] && [ -n "$TOKEN_FILE" ]; then
		usage_error "--token and --token-file are mutually exclusive"
	fi
	if [ -n "$BOOTSTRAP_FILE" ]; then
		if [ "$TOKEN_SET" = 1 ] || [ -n "$TOKEN_FILE" ]; then
			usage_error "--bootstrap-token-file enrolls a device that has no token yet: drop --token/--token-file"
		fi
		case $NAME_FROM in
		'' | hostname | serial | machine-id) ;;
		*) usage_error "--name-from $NAME_FROM: want hostname, serial or machine-id" ;;
		esac
		[ -r "$BOOTSTRAP_FILE" ] || die "--bootstrap-token-file $BOOTSTRAP_FILE: not readable"
		TOKEN=$(cat "$BOOTSTRAP_FILE")
	elif [ -n "$NAME_FROM" ]; then
		usage_error "--name-from goes with --bootstrap-token-file"
	elif [ -n "$TOKEN_FILE" ]; then
		[ -r "$TOKEN_FILE" ] || die "--token-file $TOKEN_FILE: not readable"
		TOKEN=$(cat "$TOKEN_FILE")
	elif [ "$TOKEN_SET" = 0 ]; then
		usage_error "--token or --token-file is required"
	fi
	check_value "the token" "$TOKEN"
	[ -n "$(printf '%s' "$TOKEN" | tr -d '[:space:]')" ] || usage_error "the token is empty"
	if [ -n "$CA" ]; then
		[ -r "$CA" ] || die "--ca $CA: not readable"
		[ "$BROKER_TLS" = all ] || usage_error "--ca needs TLS brokers (ssl://, tls:// or mqtts://), every one of --broker"
	fi
	if [ -n "$CA_HASH" ]; then
		if ! printf '%s' "$CA_HASH" | grep -Eq '^([sS][hH][aA]256:)?[0-9a-fA-F]{64}$'; then
			usage_error "--ca-hash $CA_HASH: want sha256: and 64 hex digits (fleet token create prints it)"
		fi
		[ "$BROKER_TLS" = all ] || usage_error "--ca-hash needs TLS brokers (ssl://, tls:// or mqtts://), every one of --broker: the pin covers them all"
	fi
}

do_install() {
	if [ -n "$JOIN" ]; then check_join; else check_credentials; fi
	check_abs --state-dir "$STATE_DIR"
	check_abs --containerd-socket "$SOCKET"
	if ! printf '%s' "$NAMESPACE" | grep -Eq '^[A-Za-z0-9]+([._-][A-Za-z0-9]+)*$'; then
		usage_error "--namespace $NAMESPACE: not a valid containerd namespace"
	fi
	if [ -n "$BINARY" ] && [ -n "$URL_BASE" ]; then
		usage_error "--binary and --url-base are mutually exclusive"
	fi
	if acting && [ "$(id -u)" != 0 ]; then
		die "run as root (sudo), or use --dry-run or --root DIR"
	fi
	[ -n "$ARCH" ] || ARCH=$(detect_arch)
	case $ARCH in
	arm64 | armv7 | armv6 | amd64) ;;
	*) usage_error "--arch $ARCH: want arm64, armv7, armv6 or amd64" ;;
	esac
	say "architecture: $ARCH"

	_bin=$(find_binary)
	check_binary_arch "$_bin"
	_unit=$(find_unit)

	check_memory_cgroup
	install_packages

	ensure_dir "$ETC_DIR" 0700
	install_binary "$_bin"
	if [ -n "$JOIN" ]; then
		printf '%s\n' "$JOIN" >"$TMPD/join"
		put_file "$TMPD/join" "$JOIN_PATH" 0600
	else
		printf '%s\n' "$TOKEN" >"$TMPD/token"
		if [ -n "$BOOTSTRAP_FILE" ]; then
			put_file "$TMPD/token" "$BOOTSTRAP_PATH" 0600
		else
			put_file "$TMPD/token" "$TOKEN_PATH" 0600
		fi
	fi
	if [ -n "$CA" ]; then put_file "$CA" "$CA_PATH" 0644; fi
	write_config
	put_file "$_unit" "$UNIT_PATH" 0644
	_unit_changed=$LAST
	if [ -n "$ROOT" ]; then enable_unit; else record l "$WANTS_PATH"; fi
	write_manifest

	if [ "$_unit_changed" = 1 ]; then run systemctl daemon-reload; fi
	# try-restart restarts a running agent so it picks up a new binary or
	# config; enable --now starts it the first time and is a no-op after.
	if [ "$CHANGED" = 1 ]; then run systemctl try-restart "$UNIT_NAME"; fi
	run systemctl enable --now "$UNIT_NAME"
	if [ -n "$JOIN" ]; then
		say "fleet-agent installed with the join string $JOIN_PATH (its broker, device, token, CA hash and hub signing key)"
	else
		say "fleet-agent installed for device $DEVICE (broker $BROKER)"
	fi
}

# --- uninstall --------------------------------------------------------------

# config_state_dir: the state-dir in the installed config, or the default.
config_state_dir() {
	_c=$(r "$CONF_PATH")
	_s=
	if [ -f "$_c" ]; then
		_s=$(sed -n "s/^state-dir: '\(.*\)'\$/\1/p" "$_c" | sed "s/''/'/g")
	fi
	printf '%s' "${_s:-/var/lib/fleet-agent}"
}

# remove_releases: the releases the agent staged in $LIB_DIR itself (its
# upgrades), and its links.
remove_releases() {
	_l=$(r "$LIB_DIR")
	[ -d "$_l" ] || return 0
	for _p in "$_l"/* "$_l"/.[!.]*; do
		{ [ -e "$_p" ] || [ -L "$_p" ]; } || continue
		remove_path "$LIB_DIR/${_p##*/}"
	done
}

do_uninstall() {
	if acting && [ "$(id -u)" != 0 ]; then
		die "run as root (sudo), or use --dry-run or --root DIR"
	fi
	_state=$(config_state_dir)
	_manifest=$(r "$MANIFEST")
	if [ -f "$_manifest" ]; then
		cp "$_manifest" "$TMPD/uninstall"
	else
		warn "no $MANIFEST: removing the files install.sh writes, where present"
		for _p in "$BIN_PATH" "$UNIT_PATH" "$CONF_PATH" "$TOKEN_PATH" "$BOOTSTRAP_PATH" "$JOIN_PATH" "$CA_PATH"; do
			printf 'f %s\n' "$_p"
		done >"$TMPD/uninstall"
		printf 'l %s\n' "$WANTS_PATH" >>"$TMPD/uninstall"
		printf 'd %s\n' "$LIB_DIR" >>"$TMPD/uninstall"
	fi
	if [ -n "$ROOT" ] || [ -f "$(r "$UNIT_PATH")" ]; then
		# Stops the agent only: KillMode=process leaves containers running.
		run systemctl disable --now "$UNIT_NAME"
	fi
	while read -r _kind _path; do
		case $_kind in
		f | l) remove_path "$_path" ;;
		esac
	done <"$TMPD/uninstall"
	[ ! -f "$_manifest" ] || remove_path "$MANIFEST"
	remove_releases
	# Directories install created, deepest first, when empty.
	sed -n 's/^d //p' "$TMPD/uninstall" | sort -r | while read -r _d; do
		_p=$(r "$_d")
		[ -d "$_p" ] || continue
		if [ "$DRY_RUN" = 1 ]; then
			say "would remove $_d/ (if empty)"
		elif rmdir "$_p" 2>/dev/null; then
			say "removed $_d/"
		else
			say "kept $_d/ (not empty)"
		fi
	done
	if [ "$PURGE" = 1 ]; then
		case $_state in
		/ | /usr* | /etc | /var | /var/lib | '') die "refusing to purge state dir $_state" ;;
		esac
		if [ -e "$(r "$_state")" ]; then
			if [ "$DRY_RUN" = 1 ]; then
				say "would remove $_state/"
			else
				rm -rf "$(r "$_state")"
				say "removed $_state/"
			fi
		fi
	fi
	run systemctl daemon-reload
	say "fleet-agent uninstalled; containerd and the containers it runs were left alone"
}

if [ "$UNINSTALL" = 1 ]; then
	if [ -n "$JOIN$BROKER$DEVICE$TOKEN$TOKEN_FILE$BOOTSTRAP_FILE$NAME_FROM$CA$CA_HASH$BINARY$URL_BASE$ARCH" ]; then
		usage_error "--uninstall takes only --purge, --root and --dry-run"
	fi
	do_uninstall
else
	[ "$PURGE" = 0 ] || usage_error "--purge goes with --uninstall"
	do_install
fi
