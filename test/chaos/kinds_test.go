package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/nodeshepherd/nodeshepherd/pkg/chaos"
)

// TestParseKinds: -kinds takes every kind of the three vocabularies and
// refuses an unknown one with the list.
func TestParseKinds(t *testing.T) {
	ks, err := parseKinds("all-zones-partition, repair-condition,fence-partition")
	if err != nil {
		t.Fatal(err)
	}
	if !ks.has(chaos.AllZonesPartition) || !ks.has(kindRepairCondition) || !ks.has(kindFencePartition) || ks.has(chaos.NodePartition) {
		t.Errorf("parsed %v", ks)
	}
	if got := ks.of(repairKinds); len(got) != 1 || got[0] != kindRepairCondition {
		t.Errorf("repair kinds of %v: %v", ks, got)
	}
	if ks, err := parseKinds(""); err != nil || ks != nil || !ks.has(chaos.LeaderKill) {
		t.Errorf("empty -kinds: %v, %v (want every kind)", ks, err)
	}
	_, err = parseKinds("node-partition,meteor")
	if err == nil || !strings.Contains(err.Error(), `"meteor"`) || !strings.Contains(err.Error(), "pool-leave") || !strings.Contains(err.Error(), "lost-answer") {
		t.Errorf("unknown kind: %v", err)
	}
}

// TestWithGrace: -grace sets the replicas' nodeMonitorGracePeriod (the
// default is what configYAML says).
func TestWithGrace(t *testing.T) {
	if !strings.Contains(configYAML, "nodeMonitorGracePeriod: "+grace.String()+"\n") {
		t.Fatalf("configYAML does not set nodeMonitorGracePeriod to grace (%v): -grace would change nothing", grace)
	}
	got := withGrace(configYAML, 10*time.Second)
	if !strings.Contains(got, "nodeMonitorGracePeriod: 10s\n") || strings.Contains(got, "nodeMonitorGracePeriod: "+grace.String()+"\n") {
		t.Errorf("withGrace 10s:\n%s", got)
	}
}
