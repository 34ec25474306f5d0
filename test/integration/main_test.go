package integration

import (
	"testing"

	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// TestMain stops the spare control plane (test/framework/spare.go) after the tests.
func TestMain(m *testing.M) { framework.Main(m) }
