package nodeipam

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodeipam/cidrset"
)

// Allocator hands out one block per configured family. It is safe for
// concurrent use.
type Allocator struct {
	mu   sync.Mutex
	sets []*cidrset.Set
}

// NewAllocator builds the sets and marks blocks overlapping the service
// ranges as used, so they are never handed out.
func NewAllocator(p *Parsed) (*Allocator, error) {
	a := &Allocator{}
	for _, f := range p.Families {
		s, err := cidrset.New(f.Cluster, f.MaskSize)
		if err != nil {
			return nil, err
		}
		for _, svc := range p.Services {
			occupyOverlap(s, svc)
		}
		a.sets = append(a.sets, s)
	}
	return a, nil
}

// occupyOverlap reserves the blocks of s that overlap r.
func occupyOverlap(s *cidrset.Set, r netip.Prefix) {
	cl := s.Cluster()
	if r.Addr().BitLen() != cl.Addr().BitLen() || !r.Overlaps(cl) {
		return
	}
	switch {
	case r.Bits() <= cl.Bits(): // the service range covers the whole cluster range
		_ = s.Occupy(cl)
	case r.Bits() >= s.MaskSize(): // inside one block
		_ = s.Occupy(netip.PrefixFrom(r.Addr(), s.MaskSize()).Masked())
	default: // several blocks
		_ = s.Occupy(r)
	}
}

// Ranges returns the cluster CIDRs, for messages.
func (a *Allocator) Ranges() []netip.Prefix {
	out := make([]netip.Prefix, len(a.sets))
	for i, s := range a.sets {
		out[i] = s.Cluster()
	}
	return out
}

// Allocate returns one block per family, or nothing: blocks taken before a
// family ran out are given back.
func (a *Allocator) Allocate() ([]netip.Prefix, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []netip.Prefix
	for _, s := range a.sets {
		p, err := s.Allocate()
		if err != nil {
			for i, q := range out {
				_ = a.sets[i].Release(q)
			}
			if errors.Is(err, cidrset.ErrFull) {
				return nil, fmt.Errorf("%w: every /%d block of %s is in use", cidrset.ErrFull, s.MaskSize(), s.Cluster())
			}
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Occupy records a node's existing podCIDRs. They must be one per family in
// the configured order, inside the cluster CIDRs and free; otherwise nothing
// is recorded.
func (a *Allocator) Occupy(podCIDRs []string) error {
	prefixes, err := a.parse(podCIDRs)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, p := range prefixes {
		if used, err := a.sets[i].InUse(p); err != nil {
			return err
		} else if used {
			return fmt.Errorf("%s is already allocated to another node", p)
		}
	}
	for i, p := range prefixes {
		if err := a.sets[i].Occupy(p); err != nil {
			return err
		}
	}
	return nil
}

// Release gives a node's podCIDRs back; CIDRs outside the ranges are ignored.
func (a *Allocator) Release(podCIDRs []string) {
	prefixes, err := a.parse(podCIDRs)
	if err != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, p := range prefixes {
		_ = a.sets[i].Release(p)
	}
}

func (a *Allocator) parse(podCIDRs []string) ([]netip.Prefix, error) {
	if len(podCIDRs) != len(a.sets) {
		return nil, fmt.Errorf("podCIDRs %v: want %d (one per family of the cluster CIDRs %v)", podCIDRs, len(a.sets), a.Ranges())
	}
	out := make([]netip.Prefix, len(podCIDRs))
	for i, s := range podCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("podCIDR %q is not a CIDR", s)
		}
		cl := a.sets[i].Cluster()
		if p.Addr().BitLen() != cl.Addr().BitLen() || !cl.Contains(p.Addr()) || p.Bits() != a.sets[i].MaskSize() {
			return nil, fmt.Errorf("podCIDR %s is not a /%d block of the cluster CIDR %s", p, a.sets[i].MaskSize(), cl)
		}
		out[i] = p
	}
	return out, nil
}
