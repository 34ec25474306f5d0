// Package nodeipam gives each node a block of pod addresses per IP family
// (spec.podCIDRs), as kube-controller-manager's nodeipam controller does with
// its range allocator: occupancy rebuilt from every node before anything is
// allocated, blocks released when nodes go away, and exhaustion reported.
package nodeipam

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/spf13/pflag"
)

// Config holds the controller's settings, with kube-controller-manager's flag names.
type Config struct {
	AllocateNodeCIDRs     bool
	ClusterCIDR           string
	NodeCIDRMaskSize      int
	NodeCIDRMaskSizeIPv4  int
	NodeCIDRMaskSizeIPv6  int
	ServiceClusterIPRange string
	DryRun                bool
}

// Upstream's default mask sizes.
const (
	defaultMaskIPv4 = 24
	defaultMaskIPv6 = 64
)

// AddFlags binds the settings to kube-controller-manager's flag names.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&c.AllocateNodeCIDRs, "allocate-node-cidrs", c.AllocateNodeCIDRs, "Allocate a pod CIDR per IP family to every node (needed by the nodeipam controller).")
	fs.StringVar(&c.ClusterCIDR, "cluster-cidr", c.ClusterCIDR, "CIDR range of pods: one IPv4 or IPv6 CIDR, or an IPv4 and an IPv6 CIDR comma-separated for dual stack.")
	fs.IntVar(&c.NodeCIDRMaskSize, "node-cidr-mask-size", c.NodeCIDRMaskSize, "Mask size of node CIDRs in a single-stack cluster (default 24 for IPv4, 64 for IPv6).")
	fs.IntVar(&c.NodeCIDRMaskSizeIPv4, "node-cidr-mask-size-ipv4", c.NodeCIDRMaskSizeIPv4, "Mask size of IPv4 node CIDRs in a dual-stack cluster (default 24).")
	fs.IntVar(&c.NodeCIDRMaskSizeIPv6, "node-cidr-mask-size-ipv6", c.NodeCIDRMaskSizeIPv6, "Mask size of IPv6 node CIDRs in a dual-stack cluster (default 64).")
	fs.StringVar(&c.ServiceClusterIPRange, "service-cluster-ip-range", c.ServiceClusterIPRange, "CIDR range(s) of Services, comma-separated; node CIDRs overlapping them are never handed out.")
}

// Family is one IP family's cluster CIDR and node mask size.
type Family struct {
	Cluster  netip.Prefix
	MaskSize int
}

// Parsed is a validated configuration.
type Parsed struct {
	Families []Family // in --cluster-cidr order
	Services []netip.Prefix
}

func parseCIDRs(flag, value string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range strings.Split(value, ",") {
		s = strings.TrimSpace(s)
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("--%s: %q is not a valid CIDR (e.g. 10.244.0.0/16 or fd00:10:244::/56)", flag, s)
		}
		if p.Masked() != p {
			return nil, fmt.Errorf("--%s: %q has host bits set; did you mean %s?", flag, s, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}

// Parse validates the configuration, naming the flag at fault.
func (c *Config) Parse() (*Parsed, error) {
	if !c.AllocateNodeCIDRs {
		return nil, errors.New("the nodeipam controller needs --allocate-node-cidrs=true and a --cluster-cidr")
	}
	if c.ClusterCIDR == "" {
		return nil, errors.New("--allocate-node-cidrs needs a --cluster-cidr")
	}
	clusters, err := parseCIDRs("cluster-cidr", c.ClusterCIDR)
	if err != nil {
		return nil, err
	}
	p := &Parsed{}
	switch len(clusters) {
	case 1:
		mask := c.NodeCIDRMaskSize
		if mask == 0 {
			mask = map[bool]int{true: defaultMaskIPv4, false: defaultMaskIPv6}[clusters[0].Addr().Is4()]
		}
		p.Families = []Family{{clusters[0], mask}}
	case 2:
		if clusters[0].Addr().Is4() == clusters[1].Addr().Is4() {
			return nil, fmt.Errorf("--cluster-cidr %q: a dual-stack cluster needs one IPv4 and one IPv6 CIDR, not two of one family", c.ClusterCIDR)
		}
		if c.NodeCIDRMaskSize != 0 {
			return nil, errors.New("--node-cidr-mask-size is for single-stack clusters; use --node-cidr-mask-size-ipv4 and --node-cidr-mask-size-ipv6")
		}
		for _, cl := range clusters {
			mask := c.NodeCIDRMaskSizeIPv6
			def := defaultMaskIPv6
			if cl.Addr().Is4() {
				mask, def = c.NodeCIDRMaskSizeIPv4, defaultMaskIPv4
			}
			if mask == 0 {
				mask = def
			}
			p.Families = append(p.Families, Family{cl, mask})
		}
	default:
		return nil, fmt.Errorf("--cluster-cidr %q: at most two CIDRs (one per IP family)", c.ClusterCIDR)
	}
	for _, f := range p.Families {
		family, flag := "IPv6", "--node-cidr-mask-size-ipv6"
		if f.Cluster.Addr().Is4() {
			family, flag = "IPv4", "--node-cidr-mask-size-ipv4"
		}
		if len(p.Families) == 1 {
			flag = "--node-cidr-mask-size"
		}
		switch {
		case f.MaskSize < f.Cluster.Bits():
			return nil, fmt.Errorf("%s=%d is smaller than the cluster CIDR %s's /%d: a node block cannot be larger than the cluster range", flag, f.MaskSize, f.Cluster, f.Cluster.Bits())
		case f.MaskSize > f.Cluster.Addr().BitLen():
			return nil, fmt.Errorf("%s=%d is too large for %s (at most /%d)", flag, f.MaskSize, family, f.Cluster.Addr().BitLen())
		case f.MaskSize-f.Cluster.Bits() > 16:
			return nil, fmt.Errorf("%s=%d splits %s into 2^%d blocks; at most 2^16 are supported: use a smaller mask size or a larger cluster CIDR prefix", flag, f.MaskSize, f.Cluster, f.MaskSize-f.Cluster.Bits())
		}
	}
	if c.ServiceClusterIPRange != "" {
		if p.Services, err = parseCIDRs("service-cluster-ip-range", c.ServiceClusterIPRange); err != nil {
			return nil, err
		}
	}
	return p, nil
}
