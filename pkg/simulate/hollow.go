package simulate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/hollownode"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// Node kinds: what runs a scenario's nodes (cluster.nodeKind, or
// simulate's --nodes).
const (
	// NodeKindFake: pkg/fakenode, the kubelet as it was read to behave.
	NodeKindFake = "fake"
	// NodeKindHollow: kubemark's hollow nodes (pkg/hollownode), the real
	// kubelet code of the control plane's version with a fake container
	// runtime and a fake cAdvisor (with a boot ID), one process per node.
	NodeKindHollow = "hollow"
)

// settingHollowKubelet is the settings row of a hollow run's kubelet timings.
const settingHollowKubelet = "hollow kubelet lease / renew / status update / report"

// NodeKinds lists the node kinds.
var NodeKinds = []string{NodeKindFake, NodeKindHollow}

// MaxHollowNodes bounds a hollow scenario: each hollow node is a kubelet
// process (about 75 MiB here, docs/hollownodes.md), and a rehearsal runs on
// a 2-core machine beside other work.
const MaxHollowNodes = 20

// What kubemark v1.37.1 fixes in its hollow kubelet and takes no flag for
// (k8s.io/kubernetes/pkg/kubemark GetHollowKubeletConfig and the kubelet's
// defaults): the lease is the kubelet's default 40 s, renewed every quarter
// of it; the node status is checked every 10 s and posted at least every
// 5 min. Real time: a hollow run cannot divide them by a time scale.
const (
	hollowLeaseDuration             = 40 * time.Second
	hollowLeaseRenewInterval        = 10 * time.Second
	hollowNodeStatusUpdateFrequency = 10 * time.Second
	hollowNodeStatusReportFrequency = 5 * time.Minute
	// hollowCPU and hollowMemory are what kubemark's fake cAdvisor reports
	// for every node (1 core, 4026531840 bytes).
	hollowCPU    = "1"
	hollowMemory = "3840Mi"
	// hollowInstanceType is the node.kubernetes.io/instance-type label of
	// a hollow node (a fake node's is "fake").
	hollowInstanceType = "hollow"
)

// NodeKind is the kind of node the scenario asks for (fake by default).
func (s *Scenario) NodeKind() string {
	if s.Cluster.NodeKind == "" {
		return NodeKindFake
	}
	return s.Cluster.NodeKind
}

// CheckNodes checks that the scenario can run on nodes of kind at time
// scale scale (kind "" is the scenario's own): a hollow run refuses what
// hollow nodes cannot do yet, each problem at its file:line, and a time
// scale other than 1.
func (s *Scenario) CheckNodes(kind string, scale float64) error {
	if kind == "" {
		kind = s.NodeKind()
	}
	if !slices.Contains(NodeKinds, kind) {
		return fmt.Errorf("node kind %q: the kinds are %s", kind, strings.Join(NodeKinds, ", "))
	}
	if kind != NodeKindHollow {
		return nil
	}
	var errs []string
	if kind != s.NodeKind() {
		// --nodes=hollow on a fake scenario: Load did not check it for
		// hollow nodes.
		root, err := s.rootNode()
		if err != nil {
			return err
		}
		errs = append(errs, s.checkHollow(root)...)
	}
	if scale != 1 {
		errs = append(errs, fmt.Sprintf("--time-scale %g: hollow nodes run at --time-scale 1 only: kubemark takes no flag for the kubelet's lease duration (%v), lease renew interval (%v), node status update frequency (%v) or node status report frequency (%v), so the real kubelet's timings cannot be divided by a time scale",
			scale, hollowLeaseDuration, hollowLeaseRenewInterval, hollowNodeStatusUpdateFrequency, hollowNodeStatusReportFrequency))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

// checkHollow lists what a scenario asks of its nodes that hollow nodes
// cannot do yet, each at its line, naming what is missing.
// Each error starts with its file:line.
func (s *Scenario) checkHollow(root *yaml.Node) []string {
	var errs []string
	at := func(n *yaml.Node, format string, args ...any) {
		line := 1
		if n != nil {
			line = n.Line
		}
		errs = append(errs, fmt.Sprintf("%s:%d: %s", s.path, line, fmt.Sprintf(format, args...)))
	}
	const on = "on hollow nodes"
	clusterNode := field(root, "cluster")
	if n := field(clusterNode, "nodeGroups"); n != nil {
		at(n, "cluster.nodeGroups %s: not implemented: a group's shape cannot be given to kubemark (its fake cAdvisor reports %s CPU and %s for every node) and group targets are not wired to hollow nodes; use cluster.zones", on, hollowCPU, hollowMemory)
	}
	total := 0
	for _, z := range s.Cluster.Zones {
		total += max(z.Nodes, 0)
	}
	if total > MaxHollowNodes {
		at(field(clusterNode, "zones"), "cluster: %d nodes %s, more than the limit of %d (each is a kubelet process of its own, about 75 MiB; docs/hollownodes.md)", total, on, MaxHollowNodes)
	}
	nodeNode := field(clusterNode, "node")
	for _, name := range []string{"cpu", "memory"} {
		if n := field(nodeNode, name); n != nil {
			at(n, "cluster.node.%s %s: kubemark takes no capacity: its fake cAdvisor reports %s CPU and %s for every node; leave cluster.node.cpu and memory out", name, on, hollowCPU, hollowMemory)
		}
	}
	if n := field(nodeNode, "images"); n != nil {
		at(n, "cluster.node.images %s: not implemented: a hollow node reports what kubemark's fake image service holds, not cluster.images", on)
	}
	if n := field(clusterNode, "images"); n != nil {
		at(n, "cluster.images %s: not implemented: a hollow node reports what kubemark's fake image service holds", on)
	}
	if n := field(clusterNode, "devices"); n != nil {
		at(n, "cluster.devices %s: not implemented: kubemark runs no DRA driver, so a hollow node publishes no ResourceSlice and prepares no claim; run this scenario on fake nodes (nodeKind: fake)", on)
	}
	kubeletNode := field(clusterNode, "kubelet")
	fixed := []struct {
		name string
		got  time.Duration
		want time.Duration
	}{
		{"leaseDuration", s.Cluster.Kubelet.LeaseDuration.Duration, hollowLeaseDuration},
		{"leaseRenewInterval", s.Cluster.Kubelet.LeaseRenewInterval.Duration, hollowLeaseRenewInterval},
		{"nodeStatusUpdateFrequency", s.Cluster.Kubelet.NodeStatusUpdateFrequency.Duration, hollowNodeStatusUpdateFrequency},
		{"nodeStatusReportFrequency", s.Cluster.Kubelet.NodeStatusReportFrequency.Duration, hollowNodeStatusReportFrequency},
	}
	for _, f := range fixed {
		if n := field(kubeletNode, f.name); n != nil && f.got != f.want {
			at(n, "cluster.kubelet.%s %v %s: kubemark takes no flag for it: the hollow kubelet's is %v; leave it out or write %v", f.name, f.got, on, f.want, f.want)
		}
	}
	if n := field(kubeletNode, "podStartDelay"); n != nil {
		at(n, "cluster.kubelet.podStartDelay %s: not implemented: kubemark's fake container runtime starts containers at once", on)
	}
	if n := field(kubeletNode, "emulateStalePodStatus"); n != nil && s.Cluster.Kubelet.EmulateStalePodStatus {
		at(n, "cluster.kubelet.emulateStalePodStatus %s: a hollow node is the real kubelet of the control plane's version (v1.37.1); it cannot emulate the 1.15 kubelet of seed 002 (run this scenario on fake nodes)", on)
	}
	if n := field(kubeletNode, "nodeStatusMaxImages"); n != nil {
		at(n, "cluster.kubelet.nodeStatusMaxImages %s: not implemented: kubemark takes no --node-status-max-images", on)
	}
	// The outofservice controller runs on hollow nodes (TestHollowOutOfService),
	// and the fake cloud powers hollow machines off (TestHollowFakeCloudRepairs);
	// a Fence step, the two together, has not been run on them by a test.
	for _, d := range s.allPolicies() {
		for i, st := range d.policy.Spec.Steps {
			if st.Action == rem.ActionFence {
				errs = append(errs, fmt.Sprintf("%s:%d: RemediationPolicy %s: spec.steps[%d] (Fence) %s: not implemented: its power-off and the out-of-service taint each run on hollow machines, but no test has run a Fence step on them yet; run this scenario on fake nodes",
					d.path, locate(d.node, fmt.Sprintf("spec.steps[%d]", i)).Line, d.policy.Name, i, on))
			}
		}
	}
	for _, w := range s.Workloads {
		for _, m := range w.objects {
			if what := volumeClaims(m.obj); what != "" {
				errs = append(errs, fmt.Sprintf("%s: %s %s: not implemented: hollow nodes have no CSI driver (the fake CSI driver runs in the fake nodes' process)", m.src, what, on))
			}
		}
	}
	timelineNode := field(root, "timeline")
	for i, st := range s.Timeline {
		where := item(timelineNode, i)
		switch st.Action {
		case ActionSetCondition, ActionClearCondition:
			typ, _, _ := strings.Cut(st.Condition, "=")
			if slices.Contains(hollownode.KubeletConditions, v1.NodeConditionType(typ)) {
				at(where, "timeline[%d] (%s %s) %s: not implemented: the real kubelet reports %s itself and writes it again at its next status update (every %v); only conditions of other reporters (KernelDeadlock, ...) can be set through the API", i, st.Action, st.Condition, on, typ, hollowNodeStatusUpdateFrequency)
			}
		}
	}
	return errs
}

// volumeClaims says which volume claims a workload object has ("" when none).
func volumeClaims(obj runtime.Object) string {
	switch o := obj.(type) {
	case *v1.PersistentVolumeClaim:
		return "a PersistentVolumeClaim"
	case *appsv1.StatefulSet:
		if len(o.Spec.VolumeClaimTemplates) > 0 {
			return "volumeClaimTemplates"
		}
	}
	if spec := podSpec(obj); spec != nil {
		for _, v := range spec.Volumes {
			if v.PersistentVolumeClaim != nil || v.Ephemeral != nil || v.CSI != nil {
				return "volume " + v.Name
			}
		}
	}
	return ""
}

// hollowNodeConfig is the hollow fleet of the scenario: the names, zones
// and labels its fake nodes would get (kubernetes.io/hostname, os and arch
// are the kubelet's own), node.kubernetes.io/instance-type hollow.
func (s *Scenario) hollowNodeConfig(binDir string) (*hollownode.Config, error) {
	fcfg := s.fakeNodeConfig(1)
	// New only names the nodes; the client is never called.
	fcfg.Client, _ = kubernetes.NewForConfig(&rest.Config{Host: "http://names.invalid"})
	m, err := fakenode.New(fcfg)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{"node.kubernetes.io/instance-type": hollowInstanceType}
	for k, v := range s.Cluster.Node.Labels {
		labels[k] = v
	}
	// The fake cloud's repairs take as long as on fake nodes (a hollow run
	// is at time scale 1).
	cfg := &hollownode.Config{Region: fakenode.DefaultRegion, Labels: labels, MaxPods: s.Cluster.Node.MaxPods,
		RebootDowntime: fcfg.RebootDowntime, ReplaceDowntime: fcfg.ReplaceDowntime, IgnorePowerOff: fcfg.IgnorePowerOff}
	if binDir != "" {
		cfg.Binary = filepath.Join(binDir, hollownode.Binary)
	}
	for _, n := range m.NodeNames() {
		cfg.Specs = append(cfg.Specs, hollownode.NodeSpec{Name: n, Zone: m.Zone(n)})
	}
	return cfg, nil
}

// hollowNodes is a hollow fleet as the runner's node set: no node groups.
type hollowNodes struct{ *hollownode.Fleet }

func (h hollowNodes) NodeNames() []string { return h.Names() }
func (h hollowNodes) Group(string) string { return "" }

// doHollow executes a step on hollow nodes: partitions and heals through
// their proxies, kubelet stops and starts as processes, conditions through
// the API as node-problem-detector writes them, a machine's shutdown,
// deletion and start as its proxy cut and its kubelet killed, then a new
// boot ID and a fresh kubelet (pkg/hollownode); d is the step's for:, in
// real time. Validation refused every other node step.
func (r *runner) doHollow(ctx context.Context, st *Step, nodes []string, d time.Duration) error {
	f := r.hollow
	later := func(undo func() error) {
		if d > 0 {
			time.AfterFunc(d, func() {
				if err := undo(); err != nil && ctx.Err() == nil {
					r.printf("undoing %s after %v: %v", st.String(), st.For.Duration, err)
				}
			})
		}
	}
	switch st.Action {
	case ActionPartition, ActionNetworkBlip:
		err := f.Partition(nodes...)
		later(func() error { return f.Heal(nodes...) })
		return err
	case ActionHeal:
		return f.Heal(nodes...)
	case ActionKubeletStop:
		err := f.KubeletStop(nodes...)
		later(func() error { return f.KubeletStart(nodes...) })
		return err
	case ActionKubeletStart:
		return f.KubeletStart(nodes...)
	case ActionKubeletRestart:
		if err := f.KubeletStop(nodes...); err != nil {
			return err
		}
		if d > 0 {
			later(func() error { return f.KubeletStart(nodes...) })
			return nil
		}
		return f.KubeletStart(nodes...)
	case ActionSetCondition:
		c := st.cond
		set := f.SetCondition
		if c.SurvivesReboot {
			set = f.SetLastingCondition
		}
		err := set(ctx, v1.NodeCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}, nodes...)
		later(func() error {
			return f.SetCondition(ctx, v1.NodeCondition{Type: c.Type, Status: hollownode.HealthyStatus(c.Type)}, nodes...)
		})
		return err
	case ActionClearCondition:
		return f.SetCondition(ctx, v1.NodeCondition{Type: st.cond.Type, Status: hollownode.HealthyStatus(st.cond.Type)}, nodes...)
	case ActionMachineShutdown:
		err := f.MachineShutdown(ctx, nodes...)
		later(func() error { return f.MachineStart(ctx, nodes...) })
		return err
	case ActionMachineStart:
		return f.MachineStart(ctx, nodes...)
	case ActionMachineDelete:
		return f.MachineDelete(ctx, nodes...)
	}
	return errors.New(st.Action + " is not implemented on hollow nodes")
}

// hollowPhase waits a random part of the hollow kubelets' Lease renew
// interval before the timeline starts. They all start together, before the
// controllers, and the setup takes about as long in every trial, so without
// it every trial cut its nodes at the same phase of their renewals, about
// 1 s after one (docs/simulate.md "Fidelity": detection 5-7 s later than on
// fake nodes in every trial); the fake nodes' renewals already fall at any
// phase.
func (r *runner) hollowPhase(ctx context.Context) error {
	d := rand.N(hollowLeaseRenewInterval)
	r.printf("hollow nodes: the timeline starts %v later, at a random phase of the kubelets' Lease renewals (every %v)", d.Round(time.Millisecond), hollowLeaseRenewInterval)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
