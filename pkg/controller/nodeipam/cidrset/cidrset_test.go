package cidrset

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func mustNew(t *testing.T, cidr string, mask int) *Set {
	t.Helper()
	s, err := New(netip.MustParsePrefix(cidr), mask)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAllocationOrderAndExhaustion(t *testing.T) {
	s := mustNew(t, "10.0.0.0/24", 26)
	want := []string{"10.0.0.0/26", "10.0.0.64/26", "10.0.0.128/26", "10.0.0.192/26"}
	for _, w := range want {
		got, err := s.Allocate()
		if err != nil || got.String() != w {
			t.Fatalf("Allocate() = %v, %v; want %s", got, err, w)
		}
	}
	if _, err := s.Allocate(); !errors.Is(err, ErrFull) {
		t.Fatalf("fifth /26 of a /24: %v, want ErrFull", err)
	}
	if err := s.Release(netip.MustParsePrefix("10.0.0.64/26")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Allocate(); err != nil || got.String() != "10.0.0.64/26" {
		t.Fatalf("after release: %v, %v", got, err)
	}
	if s.Used() != 4 || s.Size() != 4 {
		t.Errorf("used %d of %d", s.Used(), s.Size())
	}
}

func TestAllocationContinuesAfterLastBlock(t *testing.T) {
	s := mustNew(t, "10.0.0.0/24", 26)
	a, _ := s.Allocate()
	b, _ := s.Allocate()
	_ = s.Release(a)
	// The next search starts after the last allocation, so a released
	// block is not reused at once (fewer surprises for stale routes).
	if c, _ := s.Allocate(); c.String() != "10.0.0.128/26" {
		t.Errorf("got %s after %s", c, b)
	}
}

func TestOccupyRebuildsState(t *testing.T) {
	s := mustNew(t, "10.244.0.0/16", 24)
	for _, p := range []string{"10.244.0.0/24", "10.244.1.0/24", "10.244.3.0/24"} {
		if err := s.Occupy(netip.MustParsePrefix(p)); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := s.Allocate(); got.String() != "10.244.2.0/24" {
		t.Errorf("first free after rebuild = %s", got)
	}
	if err := s.Occupy(netip.MustParsePrefix("10.244.1.0/24")); err == nil || !strings.Contains(err.Error(), "already allocated") {
		t.Errorf("double occupy: %v", err)
	}
	for _, bad := range []string{"10.245.0.0/24", "10.244.0.0/25", "fd00::/64", "10.0.0.0/8"} {
		if err := s.Occupy(netip.MustParsePrefix(bad)); err == nil {
			t.Errorf("Occupy(%s) accepted", bad)
		}
	}
	// A larger prefix inside the cluster CIDR covers several blocks.
	if err := s.Occupy(netip.MustParsePrefix("10.244.8.0/22")); err != nil {
		t.Fatal(err)
	}
	if used, _ := s.InUse(netip.MustParsePrefix("10.244.11.0/24")); !used {
		t.Error("10.244.11.0/24 is covered by 10.244.8.0/22")
	}
}

func TestIPv6(t *testing.T) {
	s := mustNew(t, "fd00:10:244::/56", 64)
	a, _ := s.Allocate()
	b, _ := s.Allocate()
	if a.String() != "fd00:10:244::/64" || b.String() != "fd00:10:244:1::/64" {
		t.Errorf("got %s, %s", a, b)
	}
	if s.Size() != 256 {
		t.Errorf("size %d", s.Size())
	}
}

func TestNewValidation(t *testing.T) {
	cases := []struct {
		cidr string
		mask int
		want string
	}{
		{"10.0.0.0/16", 8, "smaller than the cluster CIDR"},
		{"10.0.0.0/16", 33, "too large"},
		{"fd00::/48", 129, "too large"},
		{"fd00::/32", 64, "at most 2^16"},
	}
	for _, tc := range cases {
		if _, err := New(netip.MustParsePrefix(tc.cidr), tc.mask); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%s, %d) = %v, want %q", tc.cidr, tc.mask, err, tc.want)
		}
	}
}

func TestWrapAroundWithPartialLastWord(t *testing.T) {
	s := mustNew(t, "10.0.0.0/16", 23)  // 128 blocks: two full words
	s2 := mustNew(t, "10.0.0.0/24", 29) // 32 blocks: half a word
	for _, set := range []*Set{s, s2} {
		for i := 0; i < set.Size(); i++ {
			if _, err := set.Allocate(); err != nil {
				t.Fatalf("block %d of %d: %v", i, set.Size(), err)
			}
		}
		mid := set.block(set.Size() / 2)
		_ = set.Release(mid)
		if got, err := set.Allocate(); err != nil || got != mid {
			t.Errorf("only free block %s, got %s, %v", mid, got, err)
		}
	}
}

func BenchmarkAllocate5000(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		s, _ := New(netip.MustParsePrefix("10.0.0.0/8"), 24)
		for j := 0; j < 5000; j++ {
			if _, err := s.Allocate(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
