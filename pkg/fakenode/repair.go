package fakenode

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
)

// The fake cloud provider's repair requests (cloudprovider/fake,
// nscloud.Repairer) are carried out on this process's machines by a
// fakecloud.Carrier (what each request does, once per request ID, is
// described there); machines is how they change a fake node's machine:
//
//   - a reboot is the fault machine-shutdown for RebootDowntime (logged as
//     faults are: "Fault injected", "Fault ended");
//   - a replaced machine is deleted, forgets its Node's UID (it renews no
//     Lease until its new Node is registered: one owned by the old Node
//     would be garbage-collected under it), and the new one registers the
//     Node anew only once it reaches the API server: one whose node is
//     partitioned (its zone cut off, say) stays unknown to the cluster
//     until the partition heals, like any kubelet;
//   - a power-off is the fault machine-shutdown without a duration.
type machines struct{ m *Manager }

var _ fakecloud.Machines = machines{}

// newCarrier is the carrier of the fake cloud's requests for m's machines.
func (m *Manager) newCarrier() *fakecloud.Carrier {
	return fakecloud.NewCarrier(fakecloud.CarrierOptions{
		Client: m.cfg.Client, RebootDowntime: m.cfg.RebootDowntime, ReplaceDowntime: m.cfg.ReplaceDowntime,
		Delay: m.cfg.RepairDelay, IgnorePowerOff: m.cfg.IgnorePowerOff, Clock: m.cfg.Clock,
	}, machines{m})
}

func (ms machines) HasMachine(name string) bool { return ms.m.nodes[name] != nil }

func (ms machines) Reboot(ctx context.Context, name string, downtime time.Duration) error {
	_, err := ms.m.Apply(ctx, Fault{Action: MachineShutdown, Target: Target{Nodes: []string{name}}, Duration: downtime})
	return err
}

func (ms machines) PowerOff(ctx context.Context, name string) error {
	_, err := ms.m.Apply(ctx, Fault{Action: MachineShutdown, Target: Target{Nodes: []string{name}}})
	return err
}

func (ms machines) DeleteMachine(ctx context.Context, name string) error {
	m, n := ms.m, ms.m.nodes[name]
	m.applyTo(n, MachineDelete, nil)
	n.mu.Lock()
	n.lease, n.uid = nil, ""
	n.mu.Unlock()
	return m.publishMachines(ctx)
}

func (ms machines) StartReplacement(ctx context.Context, name string) (string, error) {
	m, n := ms.m, ms.m.nodes[name]
	m.applyTo(n, MachineStart, nil)
	return n.bootID(), m.publishMachines(ctx)
}

func (ms machines) WaitRegistered(ctx context.Context, name string) error {
	m, n := ms.m, ms.m.nodes[name]
	for waited := false; ; waited = true {
		n.mu.Lock()
		if n.healthy() {
			n.fullStatus = true
			n.mu.Unlock()
			break
		}
		ch := make(chan struct{})
		n.reachable = ch
		n.mu.Unlock()
		if !waited {
			klog.FromContext(ctx).Info("Replacement machine cannot reach the API server: registering its Node once it can", "node", name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
	err := m.register(ctx, n)
	m.statusQ.Add(name)
	return err
}
