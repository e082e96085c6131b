package stack

import (
	"os/exec"
	"syscall"
)

// dieWithUs has the kernel kill cmd's process when the harness dies, by
// any signal, SIGKILL included: a harness stopped mid-run leaves no
// gateway, materializer or broker of its own running.
func dieWithUs(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
