// Package nodelifecycle is nodeshepherd's node lifecycle controller: it tracks
// node heartbeats (NodeStatus and Lease) on its own clock, marks silent nodes
// Unknown, taints nodes by condition (NoSchedule) and for not-ready or
// unreachable (NoExecute, rate-limited per zone with disruption modes), marks
// the pods of failed nodes NotReady and restores the readiness a flapping node
// lost. It matches kube-controller-manager's nodelifecycle controller where
// the reference describes it, and detects failures as soon as a grace period
// expires instead of at the next monitor period.
package nodelifecycle

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
)

// Config holds the controller's settings. Field names follow
// kube-controller-manager's flags.
type Config struct {
	// NodeMonitorPeriod is how often every node is checked, in addition to
	// the checks scheduled at each grace-period expiry.
	NodeMonitorPeriod time.Duration
	// NodeMonitorGracePeriod is how long a node may be silent before it is
	// marked Unknown. It must exceed NodeMonitorPeriod.
	NodeMonitorGracePeriod time.Duration
	// NodeStartupGracePeriod applies instead while a node has no Ready condition.
	NodeStartupGracePeriod time.Duration
	// NodeEvictionRate is the NoExecute tainting rate per zone, nodes per second.
	NodeEvictionRate float64
	// SecondaryNodeEvictionRate is the rate in a partially disrupted zone larger
	// than LargeClusterSizeThreshold; smaller zones then stop.
	SecondaryNodeEvictionRate float64
	LargeClusterSizeThreshold int
	// UnhealthyZoneThreshold is the not-ready fraction (with at least three
	// not-ready nodes) from which a zone is partially disrupted.
	UnhealthyZoneThreshold float32
	// PodReadinessRestoreDelay is how long after its node is Ready again a pod
	// that this controller marked NotReady, and that its kubelet did not touch
	// since, gets Ready=True back. Zero turns restoring off.
	PodReadinessRestoreDelay time.Duration
	// HeartbeatOverdueSlack: a node silent for longer than its usual heartbeat
	// interval plus this slack (or than its grace period less 1.5
	// intervals, if sooner) counts as not ready in its zone's disruption
	// state, before its own grace period ends, so that the first node of a
	// group that fell silent together is judged with the others (upstream
	// judges every node in one pass every NodeMonitorPeriod, nodeshepherd the
	// moment each grace period ends). Zero counts only nodes already marked.
	HeartbeatOverdueSlack time.Duration
	// StaticStability keeps pods Ready while every zone is in FullDisruption:
	// when no node at all heartbeats, the likely cause is the controller's or
	// the control plane's network, and marking every pod NotReady would empty
	// every Service. False restores upstream's behaviour.
	StaticStability bool
	// DryRun computes everything and reports what would be written.
	DryRun bool
}

// DefaultConfig returns kube-controller-manager's defaults, and nodeshepherd's
// own safety settings on.
func DefaultConfig() Config {
	return Config{
		NodeMonitorPeriod:         5 * time.Second,
		NodeMonitorGracePeriod:    50 * time.Second,
		NodeStartupGracePeriod:    60 * time.Second,
		NodeEvictionRate:          0.1,
		SecondaryNodeEvictionRate: 0.01,
		LargeClusterSizeThreshold: 50,
		UnhealthyZoneThreshold:    0.55,
		PodReadinessRestoreDelay:  10 * time.Second,
		HeartbeatOverdueSlack:     2 * time.Second,
		StaticStability:           true,
	}
}

// AddFlags binds the settings to kube-controller-manager's flag names, but
// for --node-monitor-period and --unhealthy-zone-threshold: other controllers
// read them too, so they are registered with the shared settings
// (descriptor.Shared) and copied in by the descriptor.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&c.NodeMonitorGracePeriod, "node-monitor-grace-period", c.NodeMonitorGracePeriod, "How long a node may go without a heartbeat (Lease renewal or NodeStatus) before it is marked Unknown.")
	fs.DurationVar(&c.NodeStartupGracePeriod, "node-startup-grace-period", c.NodeStartupGracePeriod, "Grace period for a node that has not yet reported a Ready condition.")
	fs.Float64Var(&c.NodeEvictionRate, "node-eviction-rate", c.NodeEvictionRate, "Nodes per second per zone that get a NoExecute taint while the zone is healthy.")
	fs.Float64Var(&c.SecondaryNodeEvictionRate, "secondary-node-eviction-rate", c.SecondaryNodeEvictionRate, "Nodes per second per zone that get a NoExecute taint while a zone larger than --large-cluster-size-threshold is partially disrupted.")
	fs.IntVar(&c.LargeClusterSizeThreshold, "large-cluster-size-threshold", c.LargeClusterSizeThreshold, "Zones with more nodes than this keep --secondary-node-eviction-rate in partial disruption; smaller zones stop tainting.")
	fs.DurationVar(&c.HeartbeatOverdueSlack, "heartbeat-overdue-slack", c.HeartbeatOverdueSlack, "A node silent for longer than its usual heartbeat interval plus this slack (or than its grace period less 1.5 intervals, if sooner) counts as not ready in its zone's disruption state before its grace period ends, so nodes that fall silent together are judged together (0: count only nodes already marked, as upstream).")
	fs.BoolVar(&c.StaticStability, "static-stability", c.StaticStability, "While every zone is in FullDisruption (no node heartbeats at all, likely a control-plane network problem), do not mark pods NotReady, so Services keep their endpoints; false marks them as kube-controller-manager does.")
	fs.DurationVar(&c.PodReadinessRestoreDelay, "pod-readiness-restore-delay", c.PodReadinessRestoreDelay, "After a node is Ready again, restore Ready=True on pods this controller marked NotReady and their kubelet has not updated since (0 turns it off).")
}

// Validate reports every invalid setting at once, naming the flag.
func (c *Config) Validate() error {
	var errs []error
	positive := func(flag string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("--%s must be positive, got %v", flag, d))
		}
	}
	positive("node-monitor-period", c.NodeMonitorPeriod)
	positive("node-monitor-grace-period", c.NodeMonitorGracePeriod)
	positive("node-startup-grace-period", c.NodeStartupGracePeriod)
	if c.NodeMonitorPeriod > 0 && c.NodeMonitorGracePeriod > 0 && c.NodeMonitorGracePeriod <= c.NodeMonitorPeriod {
		errs = append(errs, fmt.Errorf("--node-monitor-grace-period (%v) must be longer than --node-monitor-period (%v)", c.NodeMonitorGracePeriod, c.NodeMonitorPeriod))
	}
	if !controllerutil.Finite(c.NodeEvictionRate) || c.NodeEvictionRate < 0 {
		errs = append(errs, fmt.Errorf("--node-eviction-rate must not be negative, NaN or infinite, got %v", c.NodeEvictionRate))
	}
	if !controllerutil.Finite(c.SecondaryNodeEvictionRate) || c.SecondaryNodeEvictionRate < 0 {
		errs = append(errs, fmt.Errorf("--secondary-node-eviction-rate must not be negative, NaN or infinite, got %v", c.SecondaryNodeEvictionRate))
	}
	if c.LargeClusterSizeThreshold < 0 {
		errs = append(errs, fmt.Errorf("--large-cluster-size-threshold must not be negative, got %d", c.LargeClusterSizeThreshold))
	}
	if !(c.UnhealthyZoneThreshold > 0 && c.UnhealthyZoneThreshold <= 1) { // NaN fails too
		errs = append(errs, fmt.Errorf("--unhealthy-zone-threshold must be in (0, 1], got %v", c.UnhealthyZoneThreshold))
	}
	if c.HeartbeatOverdueSlack < 0 {
		errs = append(errs, fmt.Errorf("--heartbeat-overdue-slack must not be negative, got %v", c.HeartbeatOverdueSlack))
	}
	if c.PodReadinessRestoreDelay < 0 {
		errs = append(errs, fmt.Errorf("--pod-readiness-restore-delay must not be negative, got %v", c.PodReadinessRestoreDelay))
	}
	return errors.Join(errs...)
}
