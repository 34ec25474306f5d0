package cloudnodelifecycle

import (
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.NodeDeletionRate, c.MaxUnhealthyNodes = 0, "x"
	err := c.Validate()
	for _, want := range []string{"--node-deletion-rate", "--max-unhealthy-nodes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v does not name %s", err, want)
		}
	}
}
