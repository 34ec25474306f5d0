// Package cloudprovider holds what nodeshepherd's cloud providers share and
// registers them in k8s.io/cloud-provider's registry, next to any
// out-of-tree provider compiled in (which registers itself the same way).
package cloudprovider

import (
	cloudprovider "k8s.io/cloud-provider"
)

// Base answers "not supported" for every part of cloudprovider.Interface
// except InstancesV2, which is all the node lifecycle needs.
type Base struct{}

func (Base) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return nil, false }
func (Base) Instances() (cloudprovider.Instances, bool)       { return nil, false }
func (Base) Zones() (cloudprovider.Zones, bool)               { return nil, false }
func (Base) Clusters() (cloudprovider.Clusters, bool)         { return nil, false }
func (Base) Routes() (cloudprovider.Routes, bool)             { return nil, false }
func (Base) HasClusterID() bool                               { return false }
