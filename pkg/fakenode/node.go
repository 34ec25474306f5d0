package fakenode

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
)

// node is one simulated kubelet. Fields below mu change at run time.
type node struct {
	name, zone string
	index      int
	labels     map[string]string
	ip         string
	group      *NodeGroup // nil without node groups
	// images is node.status.images, shared by the nodes of a group: never
	// changed, only replaced.
	images []v1.ContainerImage
	// devices are the DRA device sets the node publishes.
	devices []DeviceSet

	mu             sync.Mutex
	uid            types.UID
	partitioned    bool
	kubeletStopped bool
	// machine is the fake cloud's view: running, shutdown or deleted.
	machine string
	// cloudError: the fake cloud provider answers every question about
	// this machine with an error (SetCloudError), whatever its state: a
	// provider blind to one machine.
	cloudError bool
	// boot is status.nodeInfo.bootID: a random UUID per machine start, like
	// /proc/sys/kernel/random/boot_id. A new process (the machine starts as
	// far as the API server can tell) and each machine-start after a
	// shutdown or deletion draw a new one, so that whatever was confirmed
	// about the previous boot can tell it ended. Atomic: registration
	// reads it without mu.
	boot atomic.Pointer[string]
	// conditions is what the kubelet believes; posted when the API differs.
	conditions []v1.NodeCondition
	// lasting are the conditions a fault set to survive reboots; a reboot
	// returns every other condition to its healthy status.
	lasting map[v1.NodeConditionType]bool
	// fullStatus asks the next post to include capacity, addresses and node
	// info, as a kubelet does after registering or restarting.
	fullStatus bool
	dirty      bool
	lastReport time.Time
	lease      *coordinationv1.Lease
	podCIDR    string
	ipCounter  uint32
	// volumesInUse is what was last posted in node.status.volumesInUse.
	// A powered-off node posts nothing: its last report stays.
	volumesInUse []v1.UniqueVolumeName
	// reachable, when set, is closed once the kubelet reaches the API server
	// again: a replacement machine waits on it to register its Node.
	reachable chan struct{}
	// reconnecting: the partition healed, but the kubelet has not reached
	// the API server yet. During a partition the real kubelet always has a
	// request in flight (each times out after 10 s and the next follows at
	// once; a hollow node at -v=6, docs/simulate.md "Fidelity"), over a
	// connection whose SYNs the cut network dropped: the first request to
	// get through after the heal is that one, at its connection's next SYN
	// retransmission, or the next attempt's (reconnectAt).
	reconnecting bool
	// lastAttempt is the start of the kubelet's last Lease attempt (its
	// last tick, made or not): the request in flight at a heal.
	lastAttempt time.Time
	// syncBase sets the phase of the kubelet's pod status sync: its ticks
	// are syncBase + k*NodeStatusUpdateFrequency.
	syncBase time.Time
}

// nextSync is the first tick of a sync of period, phased by base, at or
// after now.
func nextSync(base, now time.Time, period time.Duration) time.Time {
	if period <= 0 || !now.After(base) {
		return base
	}
	k := (now.Sub(base) + period - 1) / period
	return base.Add(k * period)
}

// synRetransmits are when a connection's SYN is sent again after its first,
// in tenths of the kubelet's renew interval: Linux's 1 s initial RTO,
// doubled each time (1, 3, 7 s after the first at the kubelet's 10 s).
// Later ones fall after the request's 10 s timeout.
var synRetransmits = []time.Duration{1, 3, 7}

// reconnectAt is when a kubelet whose last attempt started at attempt,
// and which attempts every interval, reaches the API server after a heal
// at heal: its request in flight at the connection's next SYN
// retransmission, or its next attempt, whose SYN goes through at once.
func reconnectAt(attempt, heal time.Time, interval time.Duration) time.Time {
	if attempt.IsZero() || attempt.After(heal) {
		return heal
	}
	for _, k := range synRetransmits {
		if at := attempt.Add(k * interval / 10); !at.Before(heal) {
			return at
		}
	}
	// Attempts follow each other at the interval: the one in flight at the
	// heal started within the last interval.
	next := attempt.Add(interval)
	for next.Before(heal) {
		next = next.Add(interval)
	}
	return next
}

// bootID is the current boot's ID.
func (n *node) bootID() string {
	if b := n.boot.Load(); b != nil {
		return *b
	}
	return ""
}

// newBoot draws the boot ID of a machine that starts.
func (n *node) newBoot() {
	id := string(uuid.NewUUID())
	n.boot.Store(&id)
}

// healthy says whether the node's kubelet reaches the API server. Callers hold mu.
func (n *node) healthy() bool {
	return !n.partitioned && !n.reconnecting && !n.kubeletStopped && (n.machine == "" || n.machine == fakecloud.Running)
}

// reached wakes whoever waits for the kubelet to reach the API server
// again. Callers hold mu.
func (n *node) reached() {
	if n.reachable != nil {
		close(n.reachable)
		n.reachable = nil
	}
}

func (n *node) isHealthy() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.healthy()
}

// kubeletConditions are the conditions a kubelet reports, with its reasons.
var kubeletConditions = []struct {
	typ                     v1.NodeConditionType
	healthy                 v1.ConditionStatus
	goodReason, goodMessage string
	badReason, badMessage   string
}{
	{v1.NodeMemoryPressure, v1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available", "KubeletHasInsufficientMemory", "kubelet has insufficient memory available"},
	{v1.NodeDiskPressure, v1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure", "KubeletHasDiskPressure", "kubelet has disk pressure"},
	{v1.NodePIDPressure, v1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available", "KubeletHasInsufficientPID", "kubelet has insufficient PID available"},
	{v1.NodeReady, v1.ConditionTrue, "KubeletReady", "kubelet is posting ready status", "KubeletNotReady", "container runtime is down (injected by nodeshepherd fakenodes)"},
}

func initialConditions(now metav1.Time) []v1.NodeCondition {
	conds := make([]v1.NodeCondition, 0, len(kubeletConditions))
	for _, k := range kubeletConditions {
		conds = append(conds, v1.NodeCondition{Type: k.typ, Status: k.healthy, Reason: k.goodReason, Message: k.goodMessage,
			LastHeartbeatTime: now, LastTransitionTime: now})
	}
	return conds
}

// setCondition changes the believed condition; it reports whether the status changed.
// Callers hold mu.
func (n *node) setCondition(c Condition, now metav1.Time) bool {
	reason, message := c.Reason, c.Message
	for _, k := range kubeletConditions {
		if k.typ == c.Type && reason == "" {
			if c.Status == k.healthy {
				reason, message = k.goodReason, k.goodMessage
			} else {
				reason, message = k.badReason, k.badMessage
			}
		}
	}
	if reason == "" {
		reason = "FaultInjected"
		if c.Status == healthyStatus(c.Type) {
			reason = "FaultCleared"
		}
	}
	if message == "" {
		message = fmt.Sprintf("%s=%s set by nodeshepherd fakenodes", c.Type, c.Status)
	}
	for i := range n.conditions {
		if n.conditions[i].Type == c.Type {
			cur := &n.conditions[i]
			changed := cur.Status != c.Status
			if changed {
				cur.LastTransitionTime = now
			}
			cur.Status, cur.Reason, cur.Message = c.Status, reason, message
			return changed
		}
	}
	n.conditions = append(n.conditions, v1.NodeCondition{Type: c.Type, Status: c.Status, Reason: reason, Message: message,
		LastHeartbeatTime: now, LastTransitionTime: now})
	return true
}

// setFault applies a condition fault: set (SurvivesReboot kept with it)
// or cleared. It reports whether the status changed. Callers hold mu.
func (n *node) setFault(c Condition, clear bool, now metav1.Time) bool {
	delete(n.lasting, c.Type)
	if clear {
		return n.setCondition(Condition{Type: c.Type, Status: healthyStatus(c.Type), Reason: c.Reason, Message: c.Message}, now)
	}
	if c.SurvivesReboot {
		if n.lasting == nil {
			n.lasting = map[v1.NodeConditionType]bool{}
		}
		n.lasting[c.Type] = true
	}
	return n.setCondition(c, now)
}

// rebooted is a fresh boot's view of the conditions: what a fault set goes
// back to its healthy status (node-problem-detector and the kubelet report
// afresh), unless the fault said it survives reboots. It reports whether a
// status changed. Callers hold mu.
func (n *node) rebooted(now metav1.Time) bool {
	changed := false
	for _, c := range slices.Clone(n.conditions) {
		if c.Status == healthyStatus(c.Type) || n.lasting[c.Type] {
			continue
		}
		msg := fmt.Sprintf("%s=%s: cleared by the machine's reboot (nodeshepherd fakenodes)", c.Type, healthyStatus(c.Type))
		changed = n.setCondition(Condition{Type: c.Type, Status: healthyStatus(c.Type), Message: msg}, now) || changed
	}
	return changed
}

// differsFrom says whether the API server's conditions disagree with the
// kubelet's belief, which makes a kubelet post its status at once.
func (n *node) differsFrom(api []v1.NodeCondition) bool {
	for _, mine := range n.conditions {
		found := false
		for _, theirs := range api {
			if theirs.Type == mine.Type {
				found = true
				if theirs.Status != mine.Status {
					return true
				}
			}
		}
		if !found {
			return true
		}
	}
	return false
}

// nodeIP is the node's fake InternalIP, unique per index.
func nodeIP(index int) string {
	i := index + 1
	return fmt.Sprintf("10.64.%d.%d", (i>>8)&0xff, i&0xff)
}

// nextPodIP hands out pod addresses from the node's podCIDR when nodeipam gave
// it one, else from a per-node /24 of 10.128.0.0/9. Callers hold mu.
func (n *node) nextPodIP() string {
	n.ipCounter++
	if p, err := netip.ParsePrefix(n.podCIDR); err == nil {
		hostBits := p.Addr().BitLen() - p.Bits()
		size := uint64(1) << min(hostBits, 32)
		if size > 2 {
			offset := uint64(n.ipCounter)%(size-2) + 1
			a := p.Masked().Addr()
			for ; offset > 0; offset-- {
				a = a.Next()
			}
			return a.String()
		}
	}
	return fmt.Sprintf("10.%d.%d.%d", 128+(n.index>>8)&0x7f, n.index&0xff, n.ipCounter%253+1)
}

// capacity is what the node offers (its group's shape, else every node's);
// allocatable is the same.
func (m *Manager) capacity(n *node) v1.ResourceList {
	c := &m.cfg
	cpu, mem, pods := c.CPU, c.Memory, c.MaxPods
	if g := n.group; g != nil {
		if !g.CPU.IsZero() {
			cpu = g.CPU
		}
		if !g.Memory.IsZero() {
			mem = g.Memory
		}
		if g.MaxPods > 0 {
			pods = g.MaxPods
		}
	}
	return v1.ResourceList{
		v1.ResourceCPU:              cpu,
		v1.ResourceMemory:           mem,
		v1.ResourcePods:             *resource.NewQuantity(int64(pods), resource.DecimalSI),
		v1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
}

// taints are the taints the node registers with: every node's, then its group's.
func (m *Manager) taints(n *node) []v1.Taint {
	if n.group == nil || len(n.group.Taints) == 0 {
		return m.cfg.Taints
	}
	return append(slices.Clone(m.cfg.Taints), n.group.Taints...)
}

// object is the Node a kubelet registers.
func (m *Manager) object(n *node, now metav1.Time) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: n.labels,
			Annotations: map[string]string{AnnotationControllerManagedAttach: "true"}},
		Spec:   v1.NodeSpec{ProviderID: "fake://" + n.name, Taints: m.taints(n)},
		Status: m.fullStatus(n, now),
	}
}

// fullStatus is the status a kubelet posts when it registers or restarts.
func (m *Manager) fullStatus(n *node, now metav1.Time) v1.NodeStatus {
	capacity := m.capacity(n)
	return v1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Phase:       v1.NodeRunning,
		Conditions:  initialConditions(now),
		Addresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: n.ip},
			{Type: v1.NodeHostName, Address: n.name},
		},
		DaemonEndpoints: v1.NodeDaemonEndpoints{KubeletEndpoint: v1.DaemonEndpoint{Port: 10250}},
		Images:          n.images,
		NodeInfo: v1.NodeSystemInfo{
			MachineID: n.name, SystemUUID: n.name, BootID: n.bootID(),
			KernelVersion: "6.1.0-fake", OSImage: "nodeshepherd fake node",
			ContainerRuntimeVersion: "fake://1.0.0", KubeletVersion: m.cfg.KubeletVersion,
			OperatingSystem: "linux", Architecture: "amd64",
		},
	}
}
