// Package cidrset hands out fixed-size blocks of a cluster CIDR, tracking
// them in a bitmap. It is pure: no API, no clock, no locking (callers lock).
package cidrset

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
)

// ErrFull is returned when every block is taken.
var ErrFull = errors.New("CIDR range is full")

// Set is the blocks of one cluster CIDR.
type Set struct {
	cluster   netip.Prefix
	blockBits int // prefix length of a block
	count     int // number of blocks
	used      []uint64
	allocated int
	next      int // where the next search starts: blocks are handed out in order, wrapping
}

// New splits cluster into blocks of prefix length maskSize.
func New(cluster netip.Prefix, maskSize int) (*Set, error) {
	cluster = cluster.Masked()
	if maskSize < cluster.Bits() {
		return nil, fmt.Errorf("node CIDR mask size /%d is smaller than the cluster CIDR %s's /%d", maskSize, cluster, cluster.Bits())
	}
	if maskSize > cluster.Addr().BitLen() {
		return nil, fmt.Errorf("node CIDR mask size /%d is too large for %s", maskSize, cluster)
	}
	if maskSize-cluster.Bits() > 16 {
		return nil, fmt.Errorf("cluster CIDR %s split into /%d blocks gives 2^%d blocks; at most 2^16 are supported, as upstream (use a larger mask size or a smaller cluster CIDR)",
			cluster, maskSize, maskSize-cluster.Bits())
	}
	n := 1 << (maskSize - cluster.Bits())
	return &Set{cluster: cluster, blockBits: maskSize, count: n, used: make([]uint64, (n+63)/64)}, nil
}

// Cluster is the range the set splits.
func (s *Set) Cluster() netip.Prefix { return s.cluster }

// MaskSize is the prefix length of every block.
func (s *Set) MaskSize() int { return s.blockBits }

// Size is the number of blocks; Used the number handed out.
func (s *Set) Size() int { return s.count }
func (s *Set) Used() int { return s.allocated }

// Allocate hands out the next free block, in address order from where the
// last search ended.
func (s *Set) Allocate() (netip.Prefix, error) {
	if s.allocated == s.count {
		return netip.Prefix{}, ErrFull
	}
	for i := 0; i < s.count; {
		idx := (s.next + i) % s.count
		word := s.used[idx/64]
		if word == ^uint64(0) {
			i += 64 - idx%64 // skip a full word
			continue
		}
		if word&(1<<(idx%64)) == 0 {
			s.set(idx)
			s.next = (idx + 1) % s.count
			return s.block(idx), nil
		}
		// Jump to the next free bit of this word, if any above idx.
		free := ^word >> (idx % 64)
		if free == 0 {
			i += 64 - idx%64
			continue
		}
		i += bits.TrailingZeros64(free)
	}
	return netip.Prefix{}, ErrFull
}

// Occupy marks a block (or every block a larger prefix covers) as used. It
// returns an error when the prefix is not inside the cluster CIDR or has a
// different size than the blocks, or is already used.
func (s *Set) Occupy(p netip.Prefix) error {
	first, last, err := s.indexes(p)
	if err != nil {
		return err
	}
	for i := first; i <= last; i++ {
		if s.isSet(i) {
			return fmt.Errorf("%s is already allocated", s.block(i))
		}
	}
	for i := first; i <= last; i++ {
		s.set(i)
	}
	return nil
}

// Release frees the blocks a prefix covers; releasing a free block is a no-op.
func (s *Set) Release(p netip.Prefix) error {
	first, last, err := s.indexes(p)
	if err != nil {
		return err
	}
	for i := first; i <= last; i++ {
		if s.isSet(i) {
			s.used[i/64] &^= 1 << (i % 64)
			s.allocated--
		}
	}
	return nil
}

// InUse says whether the block holding p is in use; p must be inside the
// cluster CIDR and no smaller than a block.
func (s *Set) InUse(p netip.Prefix) (bool, error) {
	first, _, err := s.indexes(p)
	if err != nil {
		return false, err
	}
	return s.isSet(first), nil
}

func (s *Set) set(i int) {
	s.used[i/64] |= 1 << (i % 64)
	s.allocated++
}

func (s *Set) isSet(i int) bool { return s.used[i/64]&(1<<(i%64)) != 0 }

// block returns the i-th block.
func (s *Set) block(i int) netip.Prefix {
	hostBits := uint(s.cluster.Addr().BitLen() - s.blockBits)
	hi, lo := u128(s.cluster.Addr())
	oh, ol := shl128(0, uint64(i), hostBits)
	lo, carry := bits.Add64(lo, ol, 0)
	hi, _ = bits.Add64(hi, oh, carry)
	return netip.PrefixFrom(fromU128(hi, lo, s.cluster.Addr().Is4()), s.blockBits)
}

// indexes returns the first and last block a prefix covers.
func (s *Set) indexes(p netip.Prefix) (int, int, error) {
	if p.Addr().BitLen() != s.cluster.Addr().BitLen() {
		return 0, 0, fmt.Errorf("%s is not of the cluster CIDR %s's IP family", p, s.cluster)
	}
	p = p.Masked()
	if p.Bits() > s.blockBits {
		return 0, 0, fmt.Errorf("%s is smaller than a /%d block", p, s.blockBits)
	}
	if !s.cluster.Contains(p.Addr()) || p.Bits() < s.cluster.Bits() {
		return 0, 0, fmt.Errorf("%s is not inside the cluster CIDR %s", p, s.cluster)
	}
	hostBits := uint(s.cluster.Addr().BitLen() - s.blockBits)
	ah, al := u128(p.Addr())
	ch, cl := u128(s.cluster.Addr())
	dl, borrow := bits.Sub64(al, cl, 0)
	dh, _ := bits.Sub64(ah, ch, borrow)
	_, idx := shr128(dh, dl, hostBits)
	first := int(idx)
	last := first + (1 << (s.blockBits - p.Bits())) - 1
	if last >= s.count {
		last = s.count - 1
	}
	return first, last, nil
}

// Addresses as 128-bit numbers (IPv4 in its IPv4-mapped form), so that block
// arithmetic allocates nothing.
func u128(a netip.Addr) (hi, lo uint64) {
	b := a.As16()
	return binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
}

func fromU128(hi, lo uint64, is4 bool) netip.Addr {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo)
	a := netip.AddrFrom16(b)
	if is4 {
		return a.Unmap()
	}
	return a
}

func shl128(hi, lo uint64, n uint) (uint64, uint64) {
	switch {
	case n == 0:
		return hi, lo
	case n >= 128:
		return 0, 0
	case n >= 64:
		return lo << (n - 64), 0
	}
	return hi<<n | lo>>(64-n), lo << n
}

func shr128(hi, lo uint64, n uint) (uint64, uint64) {
	switch {
	case n == 0:
		return hi, lo
	case n >= 128:
		return 0, 0
	case n >= 64:
		return 0, hi >> (n - 64)
	}
	return hi >> n, lo>>n | hi<<(64-n)
}
