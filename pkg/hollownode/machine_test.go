package hollownode

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
)

var bootIDForm = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// TestMachinePowerCycle: a machine's boot ID changes only when it boots
// after being off; its proxy is cut while it is off or partitioned, and a
// heal or a boot alone does not open it while the other holds.
func TestMachinePowerCycle(t *testing.T) {
	m := newMachine()
	first := m.boot
	if !bootIDForm.MatchString(first) || !m.on() || m.cut() {
		t.Fatalf("a new machine: boot %q, on %v, cut %v", first, m.on(), m.cut())
	}
	if _, booted := m.start("other"); booted || m.boot != first {
		t.Errorf("starting a running machine booted it: boot %q", m.boot)
	}

	m.partitioned = true
	if !m.powerOff(fakecloud.Shutdown) || m.on() || !m.cut() {
		t.Errorf("after a shutdown: on %v, cut %v", m.on(), m.cut())
	}
	if m.powerOff(fakecloud.Shutdown) {
		t.Error("a second shutdown changed something")
	}
	m.partitioned = false // healed while off
	if !m.cut() {
		t.Error("a heal opened the proxy of a machine that is off")
	}
	m.partitioned = true // partitioned again, then booted
	if _, booted := m.start("boot-2"); !booted || m.boot != "boot-2" || !m.on() {
		t.Errorf("after a start: booted %v, boot %q, on %v", booted, m.boot, m.on())
	}
	if !m.cut() {
		t.Error("a boot opened the proxy of a partitioned node")
	}
	m.partitioned = false
	if m.cut() {
		t.Error("a running, healed machine's proxy stays cut")
	}

	// Deleted: a shutdown does not make it merely shut down; it boots as
	// a new machine.
	if !m.powerOff(fakecloud.Deleted) || m.state != fakecloud.Deleted {
		t.Errorf("after a delete: state %q", m.state)
	}
	if m.powerOff(fakecloud.Shutdown) || m.state != fakecloud.Deleted {
		t.Errorf("a shutdown of a deleted machine: state %q", m.state)
	}
	if _, booted := m.start("boot-3"); !booted || m.boot != "boot-3" || m.state != fakecloud.Running {
		t.Errorf("a deleted machine started: booted %v, boot %q, state %q", booted, m.boot, m.state)
	}
	if a, b := newBootID(), newBootID(); a == b {
		t.Errorf("two boots drew the same boot ID %s", a)
	}
}

// TestMachineBootClearsConditions: a boot clears the conditions set
// through the fleet that do not survive reboots, and a deleted machine's
// start clears them all; a condition set back to healthy is forgotten.
func TestMachineBootClearsConditions(t *testing.T) {
	const (
		kernel = v1.NodeConditionType("KernelDeadlock")
		disk   = v1.NodeConditionType("ReadonlyFilesystem")
		fs     = v1.NodeConditionType("FrequentContainerdRestart")
	)
	m := newMachine()
	m.setFault(kernel, v1.ConditionTrue, false)
	m.setFault(disk, v1.ConditionTrue, true)
	m.setFault(fs, v1.ConditionTrue, false)
	m.setFault(fs, v1.ConditionFalse, false) // cleared before the reboot

	m.powerOff(fakecloud.Shutdown)
	cleared, _ := m.start("boot-2")
	if want := []v1.NodeConditionType{kernel}; !slices.Equal(cleared, want) {
		t.Errorf("a reboot cleared %v, want %v", cleared, want)
	}
	if !m.faults[disk] || len(m.faults) != 1 {
		t.Errorf("after the reboot the faults are %v, want %s kept", m.faults, disk)
	}

	m.setFault(kernel, v1.ConditionTrue, false)
	m.powerOff(fakecloud.Deleted)
	cleared, _ = m.start("boot-3")
	if want := []v1.NodeConditionType{kernel, disk}; !slices.Equal(cleared, want) {
		t.Errorf("a new machine cleared %v, want %v", cleared, want)
	}
	if len(m.faults) != 0 {
		t.Errorf("a new machine keeps %v", m.faults)
	}
}

// TestKubemarkWithoutBootIDNamed: a kubemark that takes no --boot-id
// (upstream's, or a bin/kubemark built before it) fails the fleet's start
// with a message that says what to build.
func TestKubemarkWithoutBootIDNamed(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "kubemark")
	script := "#!/bin/sh\necho 'Error: unknown flag: --boot-id' >&2\nexit 1\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := Start(ctx, Config{Binary: bin, Server: &rest.Config{Host: "https://127.0.0.1:1"}, Nodes: 1, Dir: filepath.Join(dir, "nodes")}, 20*time.Second, nil)
	if err == nil || !strings.Contains(err.Error(), "takes no --boot-id") || !strings.Contains(err.Error(), "run 'make controlplane'") {
		t.Errorf("got %v, want the missing --boot-id named with what to build", err)
	}
}
