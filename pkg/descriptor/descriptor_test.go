package descriptor

import (
	"strings"
	"testing"
	"time"
)

func TestSharedDefaultsValidateAndBadValuesNameTheFlag(t *testing.T) {
	s := DefaultShared()
	if err := s.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	s = Shared{NodeMonitorPeriod: 0, UnhealthyZoneThreshold: 1.5, MaxUnhealthyNodes: "lots"}
	err := s.Validate()
	for _, want := range []string{"--node-monitor-period must be positive", "--unhealthy-zone-threshold must be in (0, 1]", "--max-unhealthy-nodes:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

func TestTakeCopiesUnsetAndRejectsAConflictingCopy(t *testing.T) {
	var own time.Duration
	if err := Take("node-monitor-period", &own, 2*time.Second); err != nil || own != 2*time.Second {
		t.Fatalf("unset copy: %v, %v", own, err)
	}
	if err := Take("node-monitor-period", &own, 2*time.Second); err != nil {
		t.Fatalf("same value: %v", err)
	}
	own = time.Second
	if err := Take("node-monitor-period", &own, 2*time.Second); err == nil || !strings.Contains(err.Error(), "--node-monitor-period is a shared setting") {
		t.Fatalf("conflict: %v", err)
	}
}
