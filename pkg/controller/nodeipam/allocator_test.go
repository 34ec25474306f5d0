package nodeipam

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodeipam/cidrset"
)

func allocator(t *testing.T, c Config) *Allocator {
	t.Helper()
	c.AllocateNodeCIDRs = true
	p, err := c.Parse()
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAllocator(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestDualStackAllocation(t *testing.T) {
	a := allocator(t, Config{ClusterCIDR: "10.244.0.0/16,fd00:10:244::/56"})
	got, err := a.Allocate()
	if err != nil || len(got) != 2 || got[0].String() != "10.244.0.0/24" || got[1].String() != "fd00:10:244::/64" {
		t.Fatalf("got %v, %v", got, err)
	}
}

func TestServiceRangeExcluded(t *testing.T) {
	// The service range sits in the second /26 block: it is never handed out.
	a := allocator(t, Config{ClusterCIDR: "10.0.0.0/24", NodeCIDRMaskSize: 26, ServiceClusterIPRange: "10.0.0.64/28"})
	var got []string
	for {
		p, err := a.Allocate()
		if errors.Is(err, cidrset.ErrFull) {
			break
		}
		got = append(got, p[0].String())
	}
	if strings.Join(got, ",") != "10.0.0.0/26,10.0.0.128/26,10.0.0.192/26" {
		t.Errorf("got %v", got)
	}
	// A service range covering the whole cluster range leaves nothing.
	b := allocator(t, Config{ClusterCIDR: "10.0.0.0/24", NodeCIDRMaskSize: 26, ServiceClusterIPRange: "10.0.0.0/16"})
	if _, err := b.Allocate(); !errors.Is(err, cidrset.ErrFull) {
		t.Errorf("cluster inside the service range: %v", err)
	}
}

func TestAllocateIsAllOrNothing(t *testing.T) {
	// IPv4 has 2 blocks, IPv6 1: the second node finds IPv6 full and its
	// IPv4 block is given back.
	a := allocator(t, Config{ClusterCIDR: "10.0.0.0/24,fd00::/64", NodeCIDRMaskSizeIPv4: 25, NodeCIDRMaskSizeIPv6: 64})
	if _, err := a.Allocate(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(); !errors.Is(err, cidrset.ErrFull) || !strings.Contains(err.Error(), "fd00::/64") {
		t.Fatalf("err %v, want the IPv6 range named", err)
	}
	if used := a.sets[0].Used(); used != 1 {
		t.Errorf("IPv4 blocks used %d, want 1 (the failed allocation returned its block)", used)
	}
}

func TestOccupyValidation(t *testing.T) {
	a := allocator(t, Config{ClusterCIDR: "10.244.0.0/16,fd00:10:244::/56"})
	if err := a.Occupy([]string{"10.244.3.0/24", "fd00:10:244:3::/64"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{
		{"10.244.3.0/24", "fd00:10:244:4::/64"}, // IPv4 taken: nothing recorded
		{"10.244.4.0/24"},                       // one family missing
		{"10.99.0.0/24", "fd00:10:244:5::/64"},  // outside
		{"10.244.5.0/25", "fd00:10:244:5::/64"}, // wrong size
		{"fd00:10:244:5::/64", "10.244.5.0/24"}, // wrong order
	} {
		if err := a.Occupy(bad); err == nil {
			t.Errorf("Occupy(%v) accepted", bad)
		}
	}
	if used, _ := a.sets[1].InUse(mustPrefix("fd00:10:244:4::/64")); used {
		t.Error("a rejected Occupy recorded its IPv6 block")
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		c    Config
		want string
	}{
		{Config{ClusterCIDR: "10.244.0.0/16"}, "--allocate-node-cidrs=true"},
		{Config{AllocateNodeCIDRs: true}, "needs a --cluster-cidr"},
		{Config{AllocateNodeCIDRs: true, ClusterCIDR: "banana"}, "not a valid CIDR"},
		{Config{AllocateNodeCIDRs: true, ClusterCIDR: "10.0.0.0/8,10.1.0.0/16"}, "one IPv4 and one IPv6"},
		{Config{AllocateNodeCIDRs: true, ClusterCIDR: "10.0.0.0/16", NodeCIDRMaskSize: 12}, "smaller than the cluster CIDR"},
		{Config{AllocateNodeCIDRs: true, ClusterCIDR: "10.0.0.0/16,fd00::/48", NodeCIDRMaskSizeIPv6: 130}, "too large for IPv6"},
		{Config{AllocateNodeCIDRs: true, ClusterCIDR: "10.0.0.0/16,fd00::/48", NodeCIDRMaskSize: 24}, "single-stack"},
		{Config{AllocateNodeCIDRs: true, ClusterCIDR: "10.0.0.0/8", NodeCIDRMaskSize: 30}, "2^22 blocks"},
	}
	for _, tc := range cases {
		if _, err := tc.c.Parse(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
