package childproc

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const helperEnv = "CHILDPROC_TEST_PARENT"

// TestMain runs the test binary as the parent of TestChildDiesWithParent
// when helperEnv says so (a process of its own, not a test that skips):
// it starts a long sleep tied to it, says the sleep's pid, and waits to be
// killed.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "1" {
		os.Exit(m.Run())
	}
	cmd := exec.Command("sleep", "600")
	DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("child", cmd.Process.Pid)
	select {}
}

func TestKeepsOtherAttributes(t *testing.T) {
	cmd := exec.Command("true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	DieWithParent(cmd)
	if !cmd.SysProcAttr.Setpgid || cmd.SysProcAttr.Pdeathsig != syscall.SIGKILL {
		t.Fatalf("SysProcAttr %+v, want Setpgid kept and Pdeathsig SIGKILL", cmd.SysProcAttr)
	}
}

// TestChildDiesWithParent: the parent is SIGKILLed, running no cleanup; its
// child goes with it.
func TestChildDiesWithParent(t *testing.T) {
	parent := exec.Command(os.Args[0])
	parent.Env = append(os.Environ(), helperEnv+"=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = parent.Process.Kill(); _ = parent.Wait() })
	child := 0
	for sc := bufio.NewScanner(out); child == 0 && sc.Scan(); {
		if rest, ok := strings.CutPrefix(sc.Text(), "child "); ok {
			child, _ = strconv.Atoi(rest)
		}
	}
	if child == 0 {
		t.Fatal("the parent named no child")
	}
	// Should the kernel not kill it, the test must not leave it behind.
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	if !alive(child) {
		t.Fatalf("child %d not running before its parent is killed", child)
	}
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	// Generous: the kernel signals at once, this only waits for it to land.
	deadline := time.Now().Add(time.Minute)
	for alive(child) {
		if time.Now().After(deadline) {
			t.Fatalf("child %d still running a minute after its parent was killed", child)
		}
		time.Sleep(20 * time.Millisecond) // polling /proc: there is no event to wait on
	}
}

// alive: the process exists and is not a zombie (one reparented to a PID 1
// that does not reap it stays one).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command's closing parenthesis.
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || !strings.HasPrefix(string(stat[i+1:]), " Z")
}
