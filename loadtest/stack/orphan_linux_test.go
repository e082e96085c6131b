package stack

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A harness killed with SIGKILL (no chance to close its stack) leaves no
// child running: the test runs itself as such a harness, which starts a
// child the way the stack does and is then killed.
func TestChildrenDieWithTheHarness(t *testing.T) {
	if os.Getenv("FENCEGATE_ORPHAN_PARENT") != "" {
		child := exec.Command("sleep", "300")
		dieWithUs(child)
		if err := child.Start(); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(child.Process.Pid)
		select {} // until killed
	}
	parent := exec.Command(os.Args[0], "-test.run", "^TestChildrenDieWithTheHarness$")
	parent.Env = append(os.Environ(), "FENCEGATE_ORPHAN_PARENT=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("the harness said %q", line)
	}
	if !running(pid) {
		t.Fatalf("child %d not running before its harness was killed", pid)
	}
	// A pidfd turns readable when its process exits: the child's end is
	// waited for, not polled.
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	_ = parent.Process.Kill()
	_ = parent.Wait()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, int((10 * time.Second).Milliseconds()))
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		t.Fatalf("child %d still running 10 s after its harness was killed", pid)
	}
}

// running reports whether pid is alive (a zombie, killed and not yet
// reaped by whoever adopted it, is not).
func running(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}
