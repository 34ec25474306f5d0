// Package cloudprovider holds what nodeshepherd's cloud providers share and
// registers them in k8s.io/cloud-provider's registry, next to any
// out-of-tree provider compiled in (which registers itself the same way).
package cloudprovider

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
)

// Base answers "not supported" for every part of cloudprovider.Interface
// except InstancesV2, which is all the node lifecycle needs.
type Base struct{}

func (Base) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return nil, false }
func (Base) Instances() (cloudprovider.Instances, bool)       { return nil, false }
func (Base) Zones() (cloudprovider.Zones, bool)               { return nil, false }
func (Base) Clusters() (cloudprovider.Clusters, bool)         { return nil, false }
func (Base) Routes() (cloudprovider.Routes, bool)             { return nil, false }
func (Base) HasClusterID() bool                               { return false }

// Repairer reboots and replaces machines: the reboot and replace steps of
// a remediation ladder (issue 33). A provider without it cannot, and the
// ladder skips those steps, saying so.
//
// A request is an action, not a question, so it carries an ID (RequestID):
// a request sent again after its answer was lost names the same ID, and the
// provider must treat it as the one request (reboot once, not twice). A
// nil error means the provider accepted the request; whether it worked
// shows on the Node (a new boot ID, a new Node), not in the answer.
//
// premise is what the request relies on about the machine (Premise): a
// provider must refuse (RefusedError) a request whose premise no longer
// holds when it would act on it.
type Repairer interface {
	Reboot(ctx context.Context, node *v1.Node, requestID string, premise Premise) error
	Replace(ctx context.Context, node *v1.Node, requestID string, premise Premise) error
}

// Premise is the state of a machine a repair request was decided on.
type Premise string

const (
	// NoPremise: the request relies on nothing about the machine's power
	// (the pods a PodDisruptionBudget protects were evicted through the
	// Eviction API first).
	NoPremise Premise = ""
	// PremiseMachineOff: the request was decided on the provider's answer
	// that the machine is off (shut down or gone), so the node's not-Ready
	// pods that a budget protects were left to the taint manager rather
	// than evicted. A machine that runs again (a person started it, behind
	// a partition that still hides its kubelet) may run those pods again;
	// acting on it would disrupt them outside their budgets (chaos seed
	// 170030), so a provider refuses the request when the machine runs.
	PremiseMachineOff Premise = "machineOff"
)

// RepairerOf returns the provider's Repairer, if it has one.
func RepairerOf(p cloudprovider.Interface) (Repairer, bool) {
	r, ok := p.(Repairer)
	return r, ok && p != nil
}

// Fencer powers machines off: the Fence step of a remediation ladder
// (issue 46). PowerOff is a request like Reboot and Replace (same request-ID
// hygiene: sent again after a lost answer, the same ID is the same request;
// a RefusedError is the provider's refusal). A nil error means the provider
// accepted it, not that the machine is off: the remediation controller
// takes the machine for off only when the provider's InstancesV2 answers so
// (InstanceShutdown true or InstanceExists false), or the fencing endpoint
// does (PoweredOff), and neither answers that it runs, for the boot the
// request was for. A machine powered off this way stays off until a person (or
// another request) starts it again. With PremiseMachineOff, a machine that
// runs is refused, not powered off: its protected pods were never evicted.
type Fencer interface {
	PowerOff(ctx context.Context, node *v1.Node, requestID string, premise Premise) error
}

// FencerOf returns the provider's Fencer and its InstancesV2 (the answer
// that confirms a power-off), if it has both: a provider that can power a
// machine off but cannot say that it is off cannot fence alone (the
// remediation controller may take the fencing endpoint's answer instead).
func FencerOf(p cloudprovider.Interface) (Fencer, cloudprovider.InstancesV2, bool) {
	if p == nil {
		return nil, nil, false
	}
	f, ok := p.(Fencer)
	if !ok {
		return nil, nil, false
	}
	inst, ok := p.InstancesV2()
	if !ok || inst == nil {
		return nil, nil, false
	}
	return f, inst, true
}

// RequestID names one repair request: the Node (its UID), the boot it is
// for and the step. The boot is part of it because a request is about one
// boot of the machine: once the machine has booted again, the same step is
// a new request.
func RequestID(node *v1.Node, step string) string {
	return string(node.UID) + "/" + node.Status.NodeInfo.BootID + "/" + step
}

// RefusedError is a provider's explicit refusal of a repair request (an
// answer, unlike an error or a timeout, which are none).
type RefusedError struct {
	Step, Node, Message string
}

func (e *RefusedError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = "no reason given"
	}
	return fmt.Sprintf("%s of node %s refused by the provider: %s", e.Step, e.Node, msg)
}
