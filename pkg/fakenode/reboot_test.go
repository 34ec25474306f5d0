package fakenode

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"

	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
)

// conditionOf is the node's believed status of typ ("" when absent).
func conditionOf(n *node, typ v1.NodeConditionType) v1.NodeCondition {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range n.conditions {
		if c.Type == typ {
			return c
		}
	}
	return v1.NodeCondition{}
}

// A reboot (machine-shutdown, then machine-start) brings every condition a
// fault set back to its healthy status, as a fresh kubelet and
// node-problem-detector report, except one set to survive reboots; a
// kubelet restart or a healed partition clears nothing. A cleared
// condition set again without survivesReboot no longer survives, and a
// machine deleted and started again is a new machine: nothing survives.
func TestRebootClearsConditionsUnlessTheySurvive(t *testing.T) {
	m, err := New(Config{Client: fake.NewClientset(), Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	n := m.nodes[m.names[0]]
	n.conditions = initialConditions(metav1.NewTime(time.Now().Add(-time.Hour)))
	set := func(typ v1.NodeConditionType, status v1.ConditionStatus, survives bool) {
		m.applyTo(n, SetCondition, &Condition{Type: typ, Status: status, SurvivesReboot: survives})
	}
	set("KernelDeadlock", v1.ConditionTrue, false)
	set("HardwareFault", v1.ConditionTrue, true)
	set(v1.NodeMemoryPressure, v1.ConditionTrue, false)
	set(v1.NodeReady, v1.ConditionFalse, false)
	want := func(when string, statuses map[v1.NodeConditionType]v1.ConditionStatus) {
		t.Helper()
		for typ, st := range statuses {
			if got := conditionOf(n, typ); got.Status != st {
				t.Errorf("%s: %s=%s (%s), want %s", when, typ, got.Status, got.Reason, st)
			}
		}
	}
	sick := map[v1.NodeConditionType]v1.ConditionStatus{"KernelDeadlock": v1.ConditionTrue, "HardwareFault": v1.ConditionTrue,
		v1.NodeMemoryPressure: v1.ConditionTrue, v1.NodeReady: v1.ConditionFalse}
	for _, a := range []Action{Partition, Heal, KubeletStop, KubeletStart, MachineStart} {
		m.applyTo(n, a, nil)
	}
	want("without a reboot", sick)

	before := conditionOf(n, "KernelDeadlock").LastTransitionTime
	n.dirty = false
	m.applyTo(n, MachineShutdown, nil)
	want("while off", sick)
	m.applyTo(n, MachineStart, nil)
	want("after the reboot", map[v1.NodeConditionType]v1.ConditionStatus{"KernelDeadlock": v1.ConditionFalse, "HardwareFault": v1.ConditionTrue,
		v1.NodeMemoryPressure: v1.ConditionFalse, v1.NodeReady: v1.ConditionTrue})
	if !n.dirty {
		t.Error("the cleared conditions are not posted at once")
	}
	kd := conditionOf(n, "KernelDeadlock")
	if kd.LastTransitionTime.Equal(&before) || kd.Reason != "FaultCleared" {
		t.Errorf("KernelDeadlock after the reboot: %+v, want a new transition time and reason FaultCleared", kd)
	}
	if mp := conditionOf(n, v1.NodeMemoryPressure); mp.Reason != "KubeletHasSufficientMemory" {
		t.Errorf("MemoryPressure after the reboot: reason %q, want the kubelet's", mp.Reason)
	}

	// Cleared by hand and set again, without survivesReboot: a reboot clears it.
	m.applyTo(n, ClearCondition, &Condition{Type: "HardwareFault"})
	set("HardwareFault", v1.ConditionTrue, false)
	m.applyTo(n, MachineShutdown, nil)
	m.applyTo(n, MachineStart, nil)
	want("set again without survivesReboot", map[v1.NodeConditionType]v1.ConditionStatus{"HardwareFault": v1.ConditionFalse})

	// A machine deleted and created again is a new machine.
	set("HardwareFault", v1.ConditionTrue, true)
	m.applyTo(n, MachineDelete, nil)
	m.applyTo(n, MachineStart, nil)
	want("a machine created again", map[v1.NodeConditionType]v1.ConditionStatus{"HardwareFault": v1.ConditionFalse})
}

// The fake cloud's repairs, as fakenodes carries them out: a reboot keeps
// a condition that survives reboots and clears another one; a replaced
// machine registers a new Node with none of them, whatever the fault said.
func TestRepairsClearConditions(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	m, err := New(Config{Client: client, Nodes: 2, RebootDowntime: time.Millisecond, ReplaceDowntime: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m.statusQ = workqueue.NewTypedDelayingQueue[string]()
	defer m.statusQ.ShutDown()
	for _, name := range m.names {
		if err := m.register(ctx, m.nodes[name]); err != nil {
			t.Fatal(err)
		}
	}
	rebooted, replaced := m.nodes[m.names[0]], m.nodes[m.names[1]]
	for _, n := range []*node{rebooted, replaced} {
		m.applyTo(n, SetCondition, &Condition{Type: "KernelDeadlock", Status: v1.ConditionTrue})
		m.applyTo(n, SetCondition, &Condition{Type: "HardwareFault", Status: v1.ConditionTrue, SurvivesReboot: true})
	}
	oldBoot, oldUID := replaced.bootID(), replaced.uid

	requests := map[string]string{}
	for n, r := range map[string]fakecloud.Request{rebooted.name: {ID: "r1", Action: fakecloud.ActionReboot}, replaced.name: {ID: "r2", Action: fakecloud.ActionReplace}} {
		b, _ := json.Marshal(r)
		requests[n] = string(b)
	}
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fakecloud.RequestsConfigMapName, Namespace: fakecloud.ConfigMapNamespace}, Data: requests}
	if _, err := client.CoreV1().ConfigMaps(fakecloud.ConfigMapNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.repairs.OnRequests(ctx, cm)

	// Both repairs end on their own (timers of a millisecond): wait for
	// them to be marked done, with a deadline.
	var last map[string]string
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := client.CoreV1().ConfigMaps(fakecloud.ConfigMapNamespace).Get(ctx, fakecloud.RequestsConfigMapName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = got.Data
		done := 0
		for _, s := range got.Data {
			if r, err := fakecloud.ParseRequest(s); err == nil && r.Done != nil {
				done++
			}
		}
		rebooted.mu.Lock()
		defer rebooted.mu.Unlock()
		return done == 2 && rebooted.machine == fakecloud.Running, nil
	})
	if err != nil {
		t.Fatalf("repairs not done: %v; requests %v", err, last)
	}
	m.repairs.Wait()

	if kd, hf := conditionOf(rebooted, "KernelDeadlock"), conditionOf(rebooted, "HardwareFault"); kd.Status != v1.ConditionFalse || hf.Status != v1.ConditionTrue {
		t.Errorf("rebooted machine: KernelDeadlock=%s HardwareFault=%s, want False and True (it survives reboots)", kd.Status, hf.Status)
	}
	node, err := client.CoreV1().Nodes().Get(ctx, replaced.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Status.NodeInfo.BootID == oldBoot || replaced.uid == oldUID && oldUID != "" {
		t.Errorf("replaced machine: boot %q (was %q), uid %q (was %q)", node.Status.NodeInfo.BootID, oldBoot, replaced.uid, oldUID)
	}
	for _, conds := range [][]v1.NodeCondition{node.Status.Conditions, replaced.conditions} {
		for _, c := range conds {
			if c.Type == "KernelDeadlock" || c.Type == "HardwareFault" {
				t.Errorf("the replaced machine's new Node reports %s=%s", c.Type, c.Status)
			}
		}
	}
	if len(replaced.lasting) != 0 {
		t.Errorf("the new machine keeps the old one's lasting conditions: %v", replaced.lasting)
	}
}

// A new machine renews no Lease before its Node is registered: a Lease
// owned by the replaced Node would be garbage-collected under it.
func TestNoLeaseBeforeTheNode(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	m, err := New(Config{Client: client, Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	n := m.nodes[m.names[0]]
	if err := m.renewLease(ctx, n); err != nil {
		t.Fatal(err)
	}
	if l, _ := client.CoordinationV1().Leases(v1.NamespaceNodeLease).List(ctx, metav1.ListOptions{}); len(l.Items) != 0 {
		t.Fatalf("a Lease before the Node: %+v", l.Items)
	}
	n.uid = "new-node"
	if err := m.renewLease(ctx, n); err != nil {
		t.Fatal(err)
	}
	l, err := client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, n.name, metav1.GetOptions{})
	if err != nil || len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != "new-node" {
		t.Fatalf("Lease once registered: %+v, %v", l, err)
	}
}

// A stopped (hung) kubelet does not survive a reboot or a replacement: the
// machine's fresh boot starts a fresh kubelet, as systemd does (issue 46
// point 7); a kubelet stopped on a running machine stays stopped.
func TestRebootStartsAFreshKubelet(t *testing.T) {
	m, err := New(Config{Client: fake.NewClientset(), Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	n := m.nodes[m.names[0]]
	m.applyTo(n, KubeletStop, nil)
	m.applyTo(n, MachineStart, nil) // already running: no boot
	if !n.kubeletStopped {
		t.Fatal("a machine-start of a running machine restarted the kubelet")
	}
	for _, off := range []Action{MachineShutdown, MachineDelete} {
		m.applyTo(n, KubeletStop, nil)
		m.applyTo(n, off, nil)
		m.applyTo(n, MachineStart, nil)
		if n.kubeletStopped || !n.healthy() {
			t.Errorf("after %s and a machine-start: kubelet stopped %v, healthy %v; want a fresh kubelet", off, n.kubeletStopped, n.healthy())
		}
	}
}

// A node of CutOffOnceRegistered writes its Node and its first Lease
// renewal, then is cut off (silent-newcomer's kubelet): no heartbeat after.
func TestCutOffOnceRegistered(t *testing.T) {
	client := fake.NewClientset()
	// The API server gives a created Node its UID; the fake does not.
	client.PrependReactor("create", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*v1.Node).UID = "uid-1"
		return false, nil, nil
	})
	m, err := New(Config{Client: client, Nodes: 1, CutOffOnceRegistered: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n := m.nodes[m.names[0]]
	if err := m.register(ctx, n); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{}); err != nil {
		t.Errorf("the Node is not registered: %v", err)
	}
	lease, err := client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, n.name, metav1.GetOptions{})
	if err != nil || lease.Spec.RenewTime == nil {
		t.Fatalf("the first Lease renewal is not written: %v, %+v", err, lease)
	}
	n.mu.Lock()
	healthy := n.healthy()
	n.mu.Unlock()
	if healthy {
		t.Error("the node still reaches the API server after registering")
	}
	if err := m.renewLease(ctx, n); err != nil {
		t.Fatal(err)
	}
	again, _ := client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, n.name, metav1.GetOptions{})
	if !again.Spec.RenewTime.Equal(lease.Spec.RenewTime) {
		t.Errorf("a cut-off node renewed its Lease: %v, then %v", lease.Spec.RenewTime, again.Spec.RenewTime)
	}
}

// A machine replaced while its node is partitioned starts, but registers its
// Node only once it reaches the API server, as a kubelet would (chaos seeds
// 120124, 120131: a replacement registered through an all-zones cut, a
// Ready node the checker's truth counted silent).
func TestReplacementRegistersOnceReachable(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	m, n := registeredNode(ctx, t, Config{Client: client, Nodes: 1, ReplaceDowntime: time.Millisecond})
	m.applyTo(n, Partition, nil)
	oldBoot := n.bootID()
	b, _ := json.Marshal(fakecloud.Request{ID: "r1", Action: fakecloud.ActionReplace})
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fakecloud.RequestsConfigMapName, Namespace: fakecloud.ConfigMapNamespace}, Data: map[string]string{n.name: string(b)}}
	if _, err := client.CoreV1().ConfigMaps(fakecloud.ConfigMapNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.repairs.OnRequests(ctx, cm)

	// The new machine runs and waits to reach the API server.
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.machine == fakecloud.Running && n.reachable != nil, nil
	})
	if err != nil {
		t.Fatalf("the replacement machine never started and waited: %v", err)
	}
	if n.bootID() == oldBoot {
		t.Error("the replacement machine kept the old boot ID")
	}
	if _, err := client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{}); err == nil {
		t.Fatal("a partitioned replacement machine registered its Node")
	}

	m.applyTo(n, Heal, nil)
	// Heard at its next attempt (the Lease tick this test plays), not at
	// the heal itself.
	if n.isHealthy() {
		t.Fatal("the replacement reached the API server at the heal, before its next attempt")
	}
	m.reconnect(n)
	waitRepairDone(ctx, t, client, n.name, "the replacement was not marked done after the heal")
	m.repairs.Wait()
	if _, err := client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the healed replacement has no Node: %v", err)
	}
}

// With a RepairDelay, the fake cloud leaves the machine alone until the
// delay has passed (a real provider takes seconds to act on a request);
// then it carries the request out as without one.
func TestRepairDelay(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))
	m, n := registeredNode(ctx, t, Config{Client: client, Nodes: 1, Clock: clk, RepairDelay: 3 * time.Second, RebootDowntime: time.Minute})
	b, _ := json.Marshal(fakecloud.Request{ID: "r1", Action: fakecloud.ActionReboot})
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fakecloud.RequestsConfigMapName, Namespace: fakecloud.ConfigMapNamespace}, Data: map[string]string{n.name: string(b)}}
	if _, err := client.CoreV1().ConfigMaps(fakecloud.ConfigMapNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.repairs.OnRequests(ctx, cm)
	m.repairs.OnRequests(ctx, cm) // seen again (a resync): still one repair
	machine := func() string {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.machine
	}
	// The delay's timer is set; the machine runs until it fires.
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return clk.HasWaiters(), nil
	}); err != nil {
		t.Fatalf("no timer for the delay: %v", err)
	}
	clk.Step(2999 * time.Millisecond)
	if got := machine(); got == fakecloud.Shutdown {
		t.Fatal("machine off before the delay passed")
	}
	clk.Step(time.Millisecond)
	waitRepairDone(ctx, t, client, n.name, "the reboot was not carried out after the delay")
	m.repairs.Wait()
	if got := machine(); got != fakecloud.Shutdown {
		t.Errorf("machine %s after the delay, want it off for the reboot's downtime", got)
	}
	if _, err := New(Config{Client: client, Nodes: 1, RepairDelay: -time.Second}); err == nil {
		t.Error("a negative repair delay was accepted")
	}
}

// waitRepairDone waits until the fake cloud has marked node's request done.
func waitRepairDone(ctx context.Context, t *testing.T, client kubernetes.Interface, node, failure string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := client.CoreV1().ConfigMaps(fakecloud.ConfigMapNamespace).Get(ctx, fakecloud.RequestsConfigMapName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		r, err := fakecloud.ParseRequest(got.Data[node])
		return err == nil && r.Done != nil, nil
	})
	if err != nil {
		t.Fatalf("%s: %v", failure, err)
	}
}

// registeredNode starts no loop: a manager of cfg's one node, registered,
// with a status queue that the test stops.
func registeredNode(ctx context.Context, t *testing.T, cfg Config) (*Manager, *node) {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.statusQ = workqueue.NewTypedDelayingQueue[string]()
	t.Cleanup(m.statusQ.ShutDown)
	n := m.nodes[m.names[0]]
	if err := m.register(ctx, n); err != nil {
		t.Fatal(err)
	}
	return m, n
}

// SetCloudError blinds the fake cloud provider to one machine only: its
// questions fail, another machine's state is still answered; lifted, the
// blinded machine's own state is answered again, including a change made
// while blind.
func TestSetCloudErrorBlindsOneMachine(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	m, err := New(Config{Client: client, Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	blind, seen := m.nodes[m.names[0]], m.nodes[m.names[1]]
	provider := fakecloud.New(client)
	node := func(name string) *v1.Node { return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	if err := m.SetCloudError(ctx, []string{blind.name}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Apply(ctx, Fault{Action: MachineShutdown, Target: Target{Nodes: []string{blind.name, seen.name}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := provider.InstanceShutdown(ctx, node(blind.name)); err == nil {
		t.Error("the blinded machine's state was answered")
	}
	if off, err := provider.InstanceShutdown(ctx, node(seen.name)); err != nil || !off {
		t.Errorf("the other machine: shutdown %v, %v; want true", off, err)
	}
	if err := m.SetCloudError(ctx, []string{blind.name}, false); err != nil {
		t.Fatal(err)
	}
	if off, err := provider.InstanceShutdown(ctx, node(blind.name)); err != nil || !off {
		t.Errorf("the machine seen again: shutdown %v, %v; want true", off, err)
	}
	if err := m.SetCloudError(ctx, []string{"nobody"}, true); err == nil {
		t.Error("an unknown machine was accepted")
	}
}
