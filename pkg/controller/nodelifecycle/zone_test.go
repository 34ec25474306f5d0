package nodelifecycle

import (
	"testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/nodetopology"
)

func TestRateFor(t *testing.T) {
	c := DefaultConfig()
	if r := c.rateFor(nodetopology.StateNormal, 3); r != 0.1 {
		t.Errorf("normal rate %v", r)
	}
	if r := c.rateFor(nodetopology.StatePartialDisruption, 50); r != 0 {
		t.Errorf("partial rate, small zone: %v", r)
	}
	if r := c.rateFor(nodetopology.StatePartialDisruption, 51); r != 0.01 {
		t.Errorf("partial rate, large zone: %v", r)
	}
	if r := c.rateFor(nodetopology.StateFullDisruption, 3); r != 0.1 {
		t.Errorf("full disruption keeps the normal rate: %v", r)
	}
}
