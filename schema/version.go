package schema

// Version is the Fleet release, stamped at build time with
// -ldflags "-X github.com/fleetmq/fleet/schema.Version=…".
var Version = "dev"
