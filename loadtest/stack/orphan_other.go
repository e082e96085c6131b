//go:build !linux

package stack

import "os/exec"

// dieWithUs does nothing where the kernel has no parent-death signal:
// there, a harness that dies without closing its stack leaves its
// children running.
func dieWithUs(*exec.Cmd) {}
