// Package armtest tests Fleet on the Raspberry Pi's architectures from an
// x86-64 machine: it cross-builds the binaries with arm/build.sh, runs them
// and the edge agent's test suites under qemu-user-static (ARMv6 as an
// ARM1176, the Pi Zero's CPU, so ARMv7-only instructions trap), measures the
// agent's size and idle memory, and drives arm/install.sh in a temporary
// root.
//
// EnsureBinfmt registers a qemu-user-static interpreter with the kernel's
// binfmt_misc, so foreign binaries (arm64 containers in containerd) run
// directly; the end-to-end harness uses it.
//
// The tests need root, qemu-user-static, shellcheck, systemd-analyze and,
// for the connected-agent memory figure, containerd and runc. Missing tools
// fail the tests with the apt-get command that installs them.
package armtest
