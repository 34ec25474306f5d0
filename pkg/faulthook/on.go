//go:build faulthook

package faulthook

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// Enabled tells whether this binary has the hooks.
const Enabled = true

// fault is a parsed Env value.
type fault struct {
	kind, controller string
	after            time.Duration
}

func parse(spec string) (*fault, error) {
	if spec == "" {
		return nil, nil
	}
	kind, rest, _ := strings.Cut(spec, ":")
	name, delay, _ := strings.Cut(rest, ":")
	f := &fault{kind: kind, controller: name}
	if name == "" || (kind != "panic" && kind != "exit" && kind != "hang") || (kind == "hang" && delay != "") {
		return nil, fmt.Errorf("%s=%q: want panic:NAME[:AFTER], exit:NAME[:AFTER] or hang:NAME", Env, spec)
	}
	if delay != "" {
		d, err := time.ParseDuration(delay)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %v", Env, spec, err)
		}
		f.after = d
	}
	return f, nil
}

// armed is the fault of this process (nil: none).
var armed atomic.Pointer[fault]

// Check parses spec.
func Check(spec string) error {
	_, err := parse(spec)
	return err
}

// Arm makes spec the fault of this process.
func Arm(spec string) error {
	f, err := parse(spec)
	if err != nil {
		return err
	}
	armed.Store(f)
	return nil
}

// Hang blocks for good under hang:controller: the caller is inside a step
// its controller tracks, which never ends, not even when the controller is
// told to stop (as a request without a timeout would not).
func Hang(controller string) {
	if f := armed.Load(); f != nil && f.kind == "hang" && f.controller == controller {
		select {}
	}
}

// Replace returns the Run that replaces controller's under panic: or exit:
// (after waits), or nil.
func Replace(controller string, after func(time.Duration) <-chan time.Time) func(context.Context) error {
	f := armed.Load()
	if f == nil || f.controller != controller || f.kind == "hang" {
		return nil
	}
	return func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return nil
		case <-after(f.after):
		}
		if f.kind == "panic" {
			panic("injected by " + Env)
		}
		return errors.New("injected by " + Env)
	}
}
