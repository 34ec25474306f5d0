package fakenode

import (
	"regexp"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// bootIDPattern is the shape of /proc/sys/kernel/random/boot_id.
var bootIDPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// Each start of the machines, a new process for the same nodes or a
// machine-start after a shutdown, reports a new random boot ID; a
// kubelet restart or a healed partition does not.
func TestBootIDPerMachineStart(t *testing.T) {
	cfg := Config{Client: &kubernetes.Clientset{}, Nodes: 2}
	first, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	again, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	name := first.names[0]
	n := first.nodes[name]
	b0 := n.bootID()
	if !bootIDPattern.MatchString(b0) {
		t.Fatalf("boot ID %q is not a UUID like /proc/sys/kernel/random/boot_id", b0)
	}
	if other := first.nodes[first.names[1]].bootID(); other == b0 {
		t.Errorf("two machines share boot ID %q", b0)
	}
	if b := again.nodes[name].bootID(); b == b0 {
		t.Errorf("a new fakenodes process reports the previous process's boot ID %q", b)
	}
	if got := first.fullStatus(n, metav1.Now()).NodeInfo.BootID; got != b0 {
		t.Errorf("status.nodeInfo.bootID %q, want %q", got, b0)
	}

	for _, a := range []Action{Partition, Heal, KubeletStop, KubeletStart, MachineStart} {
		first.applyTo(n, a, nil)
	}
	if b := n.bootID(); b != b0 {
		t.Errorf("boot ID changed to %q without the machine starting", b)
	}
	first.applyTo(n, MachineShutdown, nil)
	first.applyTo(n, MachineStart, nil)
	b1 := n.bootID()
	if b1 == b0 || !bootIDPattern.MatchString(b1) {
		t.Errorf("after machine-start: boot ID %q (was %q), want a new UUID", b1, b0)
	}
	if !n.fullStatus {
		t.Error("a started machine does not post its full status (with the new boot ID)")
	}
}
