package remediation

import (
	_ "embed"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The custom resource: cluster-scoped RemediationPolicy objects of
// nodeshepherd.io/v1alpha1, one per pool of nodes.
const (
	Group    = "nodeshepherd.io"
	Version  = "v1alpha1"
	Kind     = "RemediationPolicy"
	Resource = "remediationpolicies"
)

// GroupVersionResource is the policies' resource, for the dynamic client.
var GroupVersionResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: Resource}

// CRD is the CustomResourceDefinition (crd.yaml): its schema follows the
// types below (TestCRDSchemaMatchesTypes), and its validation rules refuse
// what Validate refuses, so a bad policy never reaches the controller.
//
//go:embed crd.yaml
var CRD []byte

// RemediationPolicy is one pool's policy.
type RemediationPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PolicySpec   `json:"spec"`
	Status            PolicyStatus `json:"status,omitempty"`
}

// PolicyStatus is what the controller reports about the pool.
type PolicyStatus struct {
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Nodes, Unhealthy and InRepair count the pool's nodes; Blocked those
	// whose repair a brake holds back.
	Nodes     int32 `json:"nodes"`
	Unhealthy int32 `json:"unhealthy"`
	InRepair  int32 `json:"inRepair"`
	Blocked   int32 `json:"blocked"`
	// Storm: more of the pool than maxUnhealthy is unhealthy, as last
	// counted; StormEnded is when the last storm ended. The brakes' state is
	// kept here, not in a process's memory, so that a new leader keeps the
	// cooldown (TestRemediationCooldownSurvivesFailover).
	Storm      bool         `json:"storm,omitempty"`
	StormEnded *metav1.Time `json:"stormEnded,omitempty"`
	// Conflicts are nodes this policy and another select: neither repairs
	// them until one alone does (sorted, at most 20 named; the metric
	// nodeshepherd_remediation_conflicting_nodes counts them all).
	Conflicts []string `json:"conflicts,omitempty"`
	// Replacing are the machines replaced by a Replace step whose new Node
	// is not Ready yet: the old Node goes with its machine, and each still
	// counts against the brakes (in InRepair, in its zone) until a Node of
	// its name with another UID is Ready. Kept here so that a new leader
	// counts them too (TestRemediationReplacementCountsUntilReady).
	Replacing []Replacing `json:"replacing,omitempty"`
	// Repairs are the nodes in repair: step, since when, what comes next.
	Repairs []NodeRepair `json:"repairs,omitempty"`
	// Conditions: Blocked (a brake holds, with its reason), Paused.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Replacing is one machine being replaced.
type Replacing struct {
	Node string `json:"node"`
	// UID is the replaced Node's.
	UID  string `json:"uid"`
	Zone string `json:"zone,omitempty"`
	// Step is the Replace step (0-based) and Since when the repair
	// reached it.
	Step  int32       `json:"step"`
	Since metav1.Time `json:"since"`
}

// NodeRepair is one node's place on the ladder.
type NodeRepair struct {
	Node   string      `json:"node"`
	Step   int32       `json:"step"`
	Action Action      `json:"action"`
	Since  metav1.Time `json:"since"`
	// Next says what comes next and when (the next step at the timeout,
	// or done after the hold time).
	Next string `json:"next,omitempty"`
	// Fence says where a Fence step stands: requested, powered off
	// (confirmed for a boot) or vetoed, and why.
	Fence string `json:"fence,omitempty"`
}
