#!/usr/bin/env bash
# Cross-builds fleet-agent and fleet for the Raspberry Pi family into dist/:
#
#   dist/fleet-agent-linux-arm64   Pi 3/4/5, Zero 2 W with a 64-bit OS
#   dist/fleet-agent-linux-armv7   Pi 2/3/4 with a 32-bit OS
#   dist/fleet-agent-linux-armv6   Pi Zero / Zero W / Pi 1 (ARM1176)
#   dist/fleet-linux-{arm64,armv7,armv6}
#   dist/fleet-agent-linux-amd64   x86-64 devices, when ARCHES names amd64
#   dist/SHA256SUMS                sha256sum format, names relative to dist/
#   dist/VERSION                   the version stamped, one line (arm/agentimage)
#
# Static (CGO_ENABLED=0), stripped, -trimpath, with the version stamped into
# schema.Version. Usage: VERSION=v1.2.3 bash arm/build.sh (or `make arm`).
#
# Environment:
#   VERSION  version to stamp (default: git describe, else "dev")
#   DIST     output directory (default: dist at the repository root)
#   ARCHES   subset of "amd64 arm64 armv7 armv6" to build (default: the
#            three arm ones; `make agent-image` adds amd64)
#   GO       go command (default: go)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

GO=${GO:-go}
DIST=${DIST:-$root/dist}
ARCHES=${ARCHES:-arm64 armv7 armv6}
if [[ -z ${VERSION:-} ]]; then
	VERSION=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
fi
# The version is spliced into -ldflags, which the go command splits on
# spaces: keep it to characters that need no quoting.
if [[ ! $VERSION =~ ^[A-Za-z0-9][A-Za-z0-9._+~-]*$ ]]; then
	echo "build.sh: VERSION ${VERSION@Q} must match [A-Za-z0-9][A-Za-z0-9._+~-]*" >&2
	exit 2
fi

# schema.Version is what every Fleet binary reports (schema.BuildVersion).
ldflags="-s -w -X github.com/fleetmq/fleet/schema.Version=$VERSION"
# -tags grpcnotrace (with gRPC 1.62 or later): gRPC, which the agent's
# containerd client links, leaves out golang.org/x/net/trace. Its
# html/template keeps the linker from dropping unused methods: the arm64
# agent is 16.6 MiB with it, 12.9 MiB without.

mkdir -p "$DIST"
built=()
for arch in $ARCHES; do
	case $arch in
	amd64) goarch=amd64 goarm= ;;
	arm64) goarch=arm64 goarm= ;;
	armv7) goarch=arm goarm=7 ;;
	armv6) goarch=arm goarm=6 ;;
	*)
		echo "build.sh: unknown arch $arch in ARCHES (want amd64, arm64, armv7, armv6)" >&2
		exit 2
		;;
	esac
	for cmd in fleet-agent fleet; do
		out=$cmd-linux-$arch
		echo "== $out ($VERSION)"
		# Build to a temporary name so a failed build never leaves a
		# truncated binary under the final name.
		CGO_ENABLED=0 GOOS=linux GOARCH=$goarch GOARM=$goarm \
			"$GO" build -trimpath -tags grpcnotrace -ldflags "$ldflags" -o "$DIST/.$out.tmp" "./cmd/$cmd"
		mv -f "$DIST/.$out.tmp" "$DIST/$out"
		built+=("$out")
	done
done

(
	cd "$DIST"
	sha256sum -- "${built[@]}" >.SHA256SUMS.tmp
	mv -f .SHA256SUMS.tmp SHA256SUMS
	echo "$VERSION" >.VERSION.tmp
	mv -f .VERSION.tmp VERSION
)

echo "== sizes ($DIST)"
for f in "${built[@]}"; do
	bytes=$(wc -c <"$DIST/$f")
	printf '%-28s %10d bytes  %6.2f MiB\n' "$f" "$bytes" "$(awk -v b="$bytes" 'BEGIN { print b / 1048576 }')"
done
echo "== $DIST/SHA256SUMS"
cat "$DIST/SHA256SUMS"
