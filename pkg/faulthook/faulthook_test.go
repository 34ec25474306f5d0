package faulthook

import (
	"strings"
	"testing"
)

// TestCheck: an empty fault is always accepted; a fault is refused, naming
// Env, by a binary without the hooks, and parsed by one with them.
func TestCheck(t *testing.T) {
	if err := Check(""); err != nil {
		t.Fatalf("empty: %v", err)
	}
	err := Check("hang:drain")
	if Enabled != (err == nil) {
		t.Fatalf("Enabled=%v, Check(hang:drain) = %v", Enabled, err)
	}
	if !Enabled && !strings.Contains(err.Error(), Env) {
		t.Errorf("the refusal does not name %s: %v", Env, err)
	}
	if Enabled {
		for _, bad := range []string{"hang", "sleep:drain", "panic:drain:soon", "hang:drain:1s"} {
			if Check(bad) == nil {
				t.Errorf("Check(%q) accepted", bad)
			}
		}
	}
}
