package nodelifecycle

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// What `nodeshepherd explain node` needs of the node lifecycle controller.

// Ready condition reasons the controller writes when it marks a node Unknown.
const (
	ReasonStatusUnknown      = reasonUnknown
	ReasonStatusNeverUpdated = reasonNeverUpdated
)

// GracePeriod is the grace period that applies to the node: the startup
// grace while it has never reported Ready, counted from its creation
// (rounded up, so never shorter), else the monitor grace period.
func (c *Config) GracePeriod(n *v1.Node, now time.Time) (grace time.Duration, startup bool, from time.Time) {
	rec, grace, _ := c.observe(nil, n, nil, now)
	return grace, !rec.hasReady, rec.probe
}
