package hollownode

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/uuid"

	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
)

// machine is a hollow node's machine as the fleet models it: its boot,
// whether it is on, whether its network is cut, and the conditions set on
// its Node through the fleet. Its methods only decide; the node carries the
// decisions out on its kubelet process and its proxy.
//
// What a power cycle does to the hollow kubelet: a boot ID of its own. Its
// root directory and its containers need nothing more: kubemark makes a
// new root directory at every start (kubemark.GetHollowKubeletConfig, a
// fresh temporary directory) and its fake runtime lives in the kubemark
// process, so every hollow kubelet start, a restart as much as a boot,
// finds no container and an empty root directory. A real machine's reboot
// keeps the kubelet's root directory (/var/lib/kubelet is on disk) and loses
// the runtime's state (/run is tmpfs): the pods' containers are gone.
type machine struct {
	// boot is the boot ID (status.nodeInfo.bootID): a random UUID drawn at
	// each boot, as /proc/sys/kernel/random/boot_id. A kubelet restart
	// keeps it.
	boot string
	// state is the fake cloud's: fakecloud.Running, Shutdown or Deleted.
	state string
	// partitioned: a Partition not healed yet.
	partitioned bool
	// faults are the conditions set on the Node through the fleet to their
	// unhealthy status, each with whether it survives a reboot.
	faults map[v1.NodeConditionType]bool
}

func newMachine() machine {
	return machine{boot: newBootID(), state: fakecloud.Running}
}

// newBootID draws a boot ID, as the kernel does at each boot.
func newBootID() string { return string(uuid.NewUUID()) }

// on says whether the machine runs: only then can its kubelet run.
func (m *machine) on() bool { return m.state == fakecloud.Running }

// cut says whether the node's proxy forwards nothing: while the node is
// partitioned, and while the machine is off (a machine that is off sends
// nothing and answers nothing, and closes no connection either).
func (m *machine) cut() bool { return m.partitioned || !m.on() }

// powerOff turns the machine off (state Shutdown) or deletes it (Deleted;
// a deleted machine stays deleted until it starts again); false when that
// changes nothing.
func (m *machine) powerOff(state string) bool {
	if m.state == state || (m.state == fakecloud.Deleted && state == fakecloud.Shutdown) {
		return false
	}
	wasOn := m.on()
	m.state = state
	return wasOn
}

// start boots a machine that is off: a new boot ID. It returns the
// conditions the boot clears, which are those set without surviving
// reboots (after a boot node-problem-detector reports them healthy), or
// every one when the machine was deleted (the machine that starts is a new
// one). A machine that runs does not boot: false.
func (m *machine) start(bootID string) (cleared []v1.NodeConditionType, booted bool) {
	if m.on() {
		return nil, false
	}
	deleted := m.state == fakecloud.Deleted
	m.state, m.boot = fakecloud.Running, bootID
	for _, t := range slices.Sorted(maps.Keys(m.faults)) {
		if deleted || !m.faults[t] {
			cleared = append(cleared, t)
			delete(m.faults, t)
		}
	}
	return cleared, true
}

// setFault records a condition set through the fleet: unhealthy ones are
// remembered (with whether they survive reboots), healthy ones forgotten.
func (m *machine) setFault(t v1.NodeConditionType, s v1.ConditionStatus, survivesReboot bool) {
	if s == HealthyStatus(t) {
		delete(m.faults, t)
		return
	}
	if m.faults == nil {
		m.faults = map[v1.NodeConditionType]bool{}
	}
	m.faults[t] = survivesReboot
}

// applyCut sets the node's proxy from its machine. Under n.mu.
func (n *node) applyCut() {
	if n.proxy == nil {
		return
	}
	if n.m.cut() {
		n.proxy.Cut()
	} else {
		n.proxy.Heal()
	}
}

// BootID is the node's current boot ID, which its kubelet reports in
// status.nodeInfo.bootID ("" for an unknown node).
func (f *Fleet) BootID(name string) string {
	n := f.nodes[name]
	if n == nil {
		return ""
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.m.boot
}

// MachineShutdown powers the nodes' machines off: the proxy is cut first
// (a machine that is off sends nothing, answers nothing and closes no
// connection), then the kubelet is killed (SIGKILL: a power cut gives it no
// time to do anything), and the fake cloud provider reports the machines
// shut down. The kubelet does not start again until MachineStart
// (KubeletStart leaves it off; Heal leaves the proxy cut).
func (f *Fleet) MachineShutdown(ctx context.Context, names ...string) error {
	return f.powerOff(ctx, fakecloud.Shutdown, names)
}

// MachineDelete is MachineShutdown for good: the fake cloud provider
// reports the machines gone. A MachineStart after it starts a new machine
// (a new boot ID, no condition of the old one kept).
func (f *Fleet) MachineDelete(ctx context.Context, names ...string) error {
	return f.powerOff(ctx, fakecloud.Deleted, names)
}

func (f *Fleet) powerOff(ctx context.Context, state string, names []string) error {
	ns, err := f.resolve(names)
	if err != nil {
		return err
	}
	for _, n := range ns {
		n.mu.Lock()
		n.m.powerOff(state)
		n.applyCut()
		p := n.proc
		n.proc = nil
		n.mu.Unlock()
		p.kill()
	}
	return f.publishMachines(ctx, ns)
}

// MachineStart boots the nodes' machines that are off: each gets a new boot
// ID, its conditions set through the fleet without surviving reboots are
// set back to their healthy status through the API (as node-problem-detector
// reports them after a boot; all of them for a deleted machine), its proxy
// forwards again unless the node is partitioned, and a fresh kubelet starts
// with the new boot ID, which it reports (and records a Rebooted event on
// the Node, as a kubelet that finds its Node with another boot ID does).
// The fake cloud provider reports the machines running. A machine that
// runs is left as it is.
func (f *Fleet) MachineStart(ctx context.Context, names ...string) error {
	ns, err := f.resolve(names)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return errors.New("the hollow nodes are stopped: no machine starts again")
	}
	var errs []error
	for _, n := range ns {
		n.mu.Lock()
		cleared, booted := n.m.start(newBootID())
		n.applyCut()
		n.mu.Unlock()
		if !booted {
			continue
		}
		for _, t := range cleared {
			msg := fmt.Sprintf("%s=%s: cleared by the machine's reboot (nodeshepherd hollow nodes, as node-problem-detector reports after a boot)", t, HealthyStatus(t))
			err := f.patchCondition(ctx, n.name, v1.NodeCondition{Type: t, Status: HealthyStatus(t), Reason: "FaultCleared", Message: msg})
			if !apierrors.IsNotFound(err) { // a Node deleted meanwhile: the kubelet registers it anew, without them
				errs = append(errs, err)
			}
		}
		errs = append(errs, n.start())
	}
	errs = append(errs, f.publishMachines(ctx, ns))
	return errors.Join(errs...)
}

// publishMachines writes the nodes' machine states where the fake cloud
// provider reads them (pkg/cloudprovider/fake), so that it answers for
// hollow machines as for fake ones.
func (f *Fleet) publishMachines(ctx context.Context, ns []*node) error {
	states := map[string]string{}
	for _, n := range ns {
		n.mu.Lock()
		states[n.name] = n.m.state
		n.mu.Unlock()
	}
	return fakecloud.Publish(ctx, f.client, states)
}
