package schema

import "runtime/debug"

// Version is the Fleet release, stamped at build time with
// -ldflags "-X github.com/fleetmq/fleet/schema.Version=…" (`make build`,
// arm/build.sh).
var Version = "dev"

// BuildVersion is what every Fleet binary reports as its version: the
// stamped Version, else the module version Go recorded (`go install
// …@v1.2.3`), else "dev".
func BuildVersion() string {
	if Version != "" && Version != "dev" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
