//go:build !faulthook

package faulthook

import (
	"context"
	"fmt"
	"time"
)

// Enabled tells whether this binary has the hooks.
const Enabled = false

// Check refuses any fault: this binary was built without the hooks.
func Check(spec string) error {
	if spec == "" {
		return nil
	}
	return fmt.Errorf("%s=%q is set, but this nodeshepherd binary was built without fault hooks (they exist only for tests, in `make build GO_BUILD_TAGS=faulthook`); unset %s", Env, spec, Env)
}

// Arm is Check: there is nothing to arm.
func Arm(spec string) error { return Check(spec) }

// Hang does nothing.
func Hang(string) {}

// Replace never replaces a controller's Run.
func Replace(string, func(time.Duration) <-chan time.Time) func(context.Context) error { return nil }
