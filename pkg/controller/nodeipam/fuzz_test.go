package nodeipam

import (
	"errors"
	"testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodeipam/cidrset"
)

// FuzzConfigParse: any --cluster-cidr, mask sizes and
// --service-cluster-ip-range are accepted or refused with an error, never a
// panic; an accepted configuration builds an allocator whose first blocks lie
// inside their cluster CIDR, have the configured size and never overlap a
// service range.
func FuzzConfigParse(f *testing.F) {
	for _, s := range []struct {
		cluster      string
		mask, m4, m6 int
		services     string
	}{
		{"10.244.0.0/16", 0, 0, 0, ""},
		{"10.244.0.0/16,fd00:10:244::/56", 0, 0, 0, "10.96.0.0/12"},
		{"10.0.0.0/24", 26, 0, 0, "10.0.0.64/28"},
		{"10.0.0.0/24,fd00::/64", 0, 25, 64, ""},
		{"10.0.0.1/24", 0, 0, 0, ""},
		{"fd00::/48", 0, 0, 0, "fd00::/112,10.0.0.0/8"},
		{"10.0.0.0/8", 32, 0, 0, ""},
		{" 10.0.0.0/8 , ", 0, 0, 0, ","},
	} {
		f.Add(s.cluster, s.mask, s.m4, s.m6, s.services)
	}
	f.Fuzz(func(t *testing.T, cluster string, mask, m4, m6 int, services string) {
		c := Config{AllocateNodeCIDRs: true, ClusterCIDR: cluster, NodeCIDRMaskSize: mask,
			NodeCIDRMaskSizeIPv4: m4, NodeCIDRMaskSizeIPv6: m6, ServiceClusterIPRange: services}
		p, err := c.Parse()
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		a, err := NewAllocator(p)
		if err != nil {
			t.Fatalf("%+v parsed but builds no allocator: %v", c, err)
		}
		for range 3 {
			got, err := a.Allocate()
			if errors.Is(err, cidrset.ErrFull) {
				return
			}
			if err != nil {
				t.Fatalf("%+v: Allocate: %v", c, err)
			}
			if len(got) != len(p.Families) {
				t.Fatalf("%+v: %d blocks for %d families", c, len(got), len(p.Families))
			}
			for i, b := range got {
				fam := p.Families[i]
				if b.Bits() != fam.MaskSize || !fam.Cluster.Contains(b.Addr()) || b.Masked() != b {
					t.Fatalf("%+v: block %s outside %s or not a /%d", c, b, fam.Cluster, fam.MaskSize)
				}
				for _, s := range p.Services {
					if s.Overlaps(b) {
						t.Fatalf("%+v: block %s overlaps service range %s", c, b, s)
					}
				}
			}
		}
	})
}
