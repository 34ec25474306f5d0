package controllers

import (
	"testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/outofservice"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/remediation"
)

// Controllers import no other controller, so remediation names outofservice
// by a constant of its own: it must be the controller's name.
func TestOutOfServiceNameMatches(t *testing.T) {
	if remediation.OutOfServiceName != outofservice.Name {
		t.Fatalf("remediation.OutOfServiceName %q, outofservice.Name %q", remediation.OutOfServiceName, outofservice.Name)
	}
}
