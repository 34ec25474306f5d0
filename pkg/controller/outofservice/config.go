package outofservice

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/spf13/pflag"

	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/providers"
	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/webhook"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// Config holds the controller's settings.
type Config struct {
	// After is how long a node must have been NotReady or Unknown (from its
	// Ready condition's lastTransitionTime) before it is tainted.
	After time.Duration
	// MaxNodes and MaxPercent bound the nodes carrying the out-of-service
	// taint at once (whoever put it there); both apply.
	MaxNodes   int
	MaxPercent float64
	// Fencing is the fencing endpoint that confirms a machine powered off
	// (empty URL: none). Its confirmation does not override a zone or
	// cluster disruption, unlike the provider's and a person's.
	Fencing webhook.Config
	// Cloud is the cloudnodelifecycle controller's --cloud-provider
	// settings (pkg/controllers copies them here): one provider, one set of
	// flags. Empty Name: the annotation is the only confirmation.
	Cloud providers.Options
	// NodeMonitorPeriod (shared) is how often silent nodes are looked at
	// again: the provider's answer may change.
	NodeMonitorPeriod time.Duration
	// UnhealthyZoneThreshold (shared) classifies zones as the nodelifecycle
	// controller does.
	UnhealthyZoneThreshold float32
	DryRun                 bool
	// TakeoverWait is how long after the controller starts (once this
	// process leads) its first taint waits, so that the previous leader's
	// writes have landed or failed and are counted (settleBudget): at least
	// kube.WriteTimeout, the bound of each of those writes. No flag: tests
	// lengthen it to make their timing loose.
	TakeoverWait time.Duration
}

// DefaultConfig returns the defaults: 5 minutes silent, at most 3 nodes
// and 10 % of the nodes (rounded up) out of service at once.
func DefaultConfig() Config {
	return Config{After: 5 * time.Minute, MaxNodes: 3, MaxPercent: 10, Fencing: webhook.Config{Timeout: 5 * time.Second},
		NodeMonitorPeriod: 5 * time.Second, UnhealthyZoneThreshold: 0.55, TakeoverWait: kube.WriteTimeout}
}

// AddFlags registers the controller's own flags.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&c.After, "out-of-service-after", c.After, "How long a node must have been NotReady or Unknown (from its Ready condition's lastTransitionTime, rounded up to the next second) before the outofservice controller taints a confirmed-dead node node.kubernetes.io/out-of-service:NoExecute.")
	fs.IntVar(&c.MaxNodes, "max-out-of-service-nodes", c.MaxNodes, "At most this many nodes carry the out-of-service taint at once (together with --max-out-of-service-percent).")
	fs.Float64Var(&c.MaxPercent, "max-out-of-service-percent", c.MaxPercent, "At most this percentage of all nodes, rounded up, carry the out-of-service taint at once (together with --max-out-of-service-nodes); 0 forbids any.")
	fs.StringVar(&c.Fencing.URL, "out-of-service-fencing-webhook-url", c.Fencing.URL, "HTTPS endpoint of a fencing service, asked (question PoweredOff, docs/outofservice.md) whether a silent node's machine is confirmed powered off; its yes confirms the death like the cloud provider's, except in a disrupted zone or cluster. The remediation controller asks it too: its yes confirms a Fence step's power-off like the provider's, and its no vetoes it (docs/remediation.md). Empty: none.")
	fs.StringVar(&c.Fencing.CAFile, "out-of-service-fencing-webhook-ca-file", c.Fencing.CAFile, "PEM CA bundle that signs the fencing endpoint's certificate (default: the system's roots).")
	fs.DurationVar(&c.Fencing.Timeout, "out-of-service-fencing-webhook-timeout", c.Fencing.Timeout, "Timeout of one question to the fencing endpoint; a timeout is never an answer.")
}

// fencingFlags is the fencing endpoint's flags' prefix, for messages.
const fencingFlags = "--out-of-service-fencing-webhook"

// Validate checks the settings, naming flags.
func (c *Config) Validate() error {
	var errs []error
	if c.After <= 0 {
		errs = append(errs, fmt.Errorf("--out-of-service-after must be positive, got %v", c.After))
	}
	if c.MaxNodes < 0 {
		errs = append(errs, fmt.Errorf("--max-out-of-service-nodes must be 0 or more, got %d", c.MaxNodes))
	}
	if math.IsNaN(c.MaxPercent) || c.MaxPercent < 0 || c.MaxPercent > 100 {
		errs = append(errs, fmt.Errorf("--max-out-of-service-percent must be between 0 and 100, got %v", c.MaxPercent))
	}
	if c.Fencing.URL != "" {
		if _, err := webhook.NewNamed(c.Fencing, fencingFlags); err != nil {
			errs = append(errs, err)
		}
	}
	if c.NodeMonitorPeriod <= 0 {
		errs = append(errs, fmt.Errorf("--node-monitor-period must be positive, got %v", c.NodeMonitorPeriod))
	}
	if c.TakeoverWait < kube.WriteTimeout {
		errs = append(errs, fmt.Errorf("the outofservice controller's wait after a takeover must be at least kube.WriteTimeout (%v), got %v", kube.WriteTimeout, c.TakeoverWait))
	}
	if c.UnhealthyZoneThreshold <= 0 || c.UnhealthyZoneThreshold > 1 {
		errs = append(errs, fmt.Errorf("--unhealthy-zone-threshold must be in (0, 1], got %v", c.UnhealthyZoneThreshold))
	}
	return errors.Join(errs...)
}

// limit is the budget out of total nodes: the smaller of the count and the
// percentage, rounded up (10 % of 5 nodes is 1).
func (c *Config) limit(total int) int {
	pct := int(math.Ceil(c.MaxPercent * float64(total) / 100))
	return min(pct, c.MaxNodes)
}
