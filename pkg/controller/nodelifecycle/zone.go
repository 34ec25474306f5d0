package nodelifecycle

import "github.com/nodeshepherd/nodeshepherd/pkg/nodetopology"

// rateFor is the NoExecute tainting rate of a zone in a state. A fully
// disrupted zone keeps the normal rate while other zones are healthy: the
// all-zones case is handled separately by stopping altogether.
func (c *Config) rateFor(state nodetopology.ZoneState, zoneSize int) float64 {
	switch state {
	case nodetopology.StatePartialDisruption:
		if zoneSize > c.LargeClusterSizeThreshold {
			return c.SecondaryNodeEvictionRate
		}
		return 0
	default:
		return c.NodeEvictionRate
	}
}
