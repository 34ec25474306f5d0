package integration

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// Ports for `nodeshepherd run` processes. A test cannot hand a listener to
// another process, so it picks a free port and the process binds it a
// moment later; in between something else may take it:
//   - an outgoing connection, whose local port the kernel picks from the
//     ephemeral range: ports are picked below it (and below the control
//     planes' range, pkg/controlplane), where none lands;
//   - another test picking at the same moment: startListening sees the
//     process exit on "address already in use" and starts it again on
//     another port.
const (
	testPortsLow  = 16000
	testPortsHigh = 20000 // pkg/controlplane picks from here up
)

// freePort returns a loopback port that is free now, for startListening.
func freePort(t *testing.T) int {
	t.Helper()
	for range 1000 {
		p := testPortsLow + rand.IntN(testPortsHigh-testPortsLow)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // taken
		}
		l.Close()
		return p
	}
	t.Fatalf("no free port in %d-%d", testPortsLow, testPortsHigh-1)
	return 0
}

// startListening starts `nodeshepherd args(port)...` with port a free
// loopback port and returns once the process listens on it; a port taken
// between the pick and the bind costs a restart on another port.
func startListening(t *testing.T, args func(port int) []string) (*exec.Cmd, int) {
	t.Helper()
	const attempts = 5
	for attempt := 1; ; attempt++ {
		port := freePort(t)
		cmd := framework.StartBinary(t, args(port)...)
		deadline := time.Now().Add(2 * time.Minute) // a cold, busy machine
		for {
			if ports, err := listening(cmd.Process.Pid); err == nil && slices.Contains(ports, port) {
				return cmd, port
			}
			if !alive(cmd.Process.Pid) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("nodeshepherd %v: not listening on port %d after 2m; log:\n%s", args(port), port, logOf(cmd))
			}
			time.Sleep(100 * time.Millisecond) // polling the process's sockets
		}
		log := logOf(cmd)
		if !strings.Contains(log, "address already in use") || attempt == attempts {
			t.Fatalf("nodeshepherd %v exited before listening on port %d (attempt %d); log:\n%s", args(port), port, attempt, log)
		}
		t.Logf("port %d was taken before nodeshepherd bound it; trying another", port)
	}
}

// alive tells whether process pid is running (not exited, reaped or not).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces, the state follows the last ')'.
	_, rest, _ := strings.Cut(string(stat[strings.LastIndexByte(string(stat), ')')+1:]), " ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}

// logOf returns what a process started by framework.StartBinary wrote.
func logOf(cmd *exec.Cmd) string {
	f, ok := cmd.Stdout.(*os.File)
	if !ok {
		return ""
	}
	data, _ := os.ReadFile(f.Name())
	return string(data)
}
