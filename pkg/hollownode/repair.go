package hollownode

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
)

// The fake cloud provider's repair requests (cloudprovider/fake,
// nscloud.Repairer) are carried out on the fleet's machines by a
// fakecloud.Carrier, as on the fake nodes' (what each request does, once
// per request ID, is described there); machines is how they change a
// hollow node's machine:
//
//   - a reboot is MachineShutdown, then MachineStart after the downtime: a
//     new boot ID, and a fresh kubelet that reports it;
//   - a replaced machine is deleted (MachineDelete: its kubelet killed); the
//     Carrier deletes its Node, Lease and pods; after the downtime the new
//     machine starts (MachineStart: a new boot ID, none of the old
//     machine's conditions) and its fresh kubelet registers the Node anew,
//     with a new UID, once it reaches the API server (through its proxy: a
//     partitioned node registers once healed);
//   - a power-off is MachineShutdown.
type machines struct{ f *Fleet }

var _ fakecloud.Machines = machines{}

// startRepairs starts carrying out the fake cloud's repair requests on the
// fleet's machines until Stop, and waits until the requests are read.
func (f *Fleet) startRepairs(ctx context.Context, timeout time.Duration) error {
	// The repairs outlive Start's context: they end with Stop.
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f.cancelRepairs = cancel
	c := fakecloud.NewCarrier(fakecloud.CarrierOptions{Client: f.client, RebootDowntime: f.cfg.RebootDowntime,
		ReplaceDowntime: f.cfg.ReplaceDowntime, IgnorePowerOff: f.cfg.IgnorePowerOff}, machines{f})
	synced, stop := c.Start(ctx)
	f.stopRepairs = stop
	syncCtx, done := context.WithTimeout(ctx, timeout)
	defer done()
	if !cache.WaitForCacheSync(syncCtx.Done(), synced) {
		return fmt.Errorf("hollow nodes: the fake cloud's repair requests (%s/%s) not read within %v", fakecloud.ConfigMapNamespace, fakecloud.RequestsConfigMapName, timeout)
	}
	return nil
}

func (ms machines) HasMachine(name string) bool { return ms.f.nodes[name] != nil }

// Reboot shuts the machine down and starts it after downtime, unless the
// fleet stops first.
func (ms machines) Reboot(ctx context.Context, name string, downtime time.Duration) error {
	f := ms.f
	if err := f.MachineShutdown(ctx, name); err != nil {
		return err
	}
	f.rebooting.Go(func() {
		t := time.NewTimer(downtime)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := f.MachineStart(ctx, name); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Starting a rebooted machine", "node", name)
			return
		}
		klog.FromContext(ctx).Info("Rebooted machine started", "node", name, "bootID", f.BootID(name))
	})
	return nil
}

func (ms machines) PowerOff(ctx context.Context, name string) error {
	return ms.f.MachineShutdown(ctx, name)
}

func (ms machines) DeleteMachine(ctx context.Context, name string) error {
	return ms.f.MachineDelete(ctx, name)
}

func (ms machines) StartReplacement(ctx context.Context, name string) (string, error) {
	err := ms.f.MachineStart(ctx, name)
	return ms.f.BootID(name), err
}

// WaitRegistered waits until the Node exists and reports the machine's boot
// ID: the new kubelet has registered it (the old Node was deleted with the
// old machine, whose kubelet was killed first).
func (ms machines) WaitRegistered(ctx context.Context, name string) error {
	f := ms.f
	return wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		n, err := f.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil // not registered yet, or the API server not reached: try again
		}
		return n.Status.NodeInfo.BootID == f.BootID(name), nil
	})
}
