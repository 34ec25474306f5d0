package integration

import (
	"testing"

	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// serviceAccountScenarios are the integration tests whose controllers run
// as deploy/'s ServiceAccount (they call asServiceAccount first):
// deploy/base and the components of the controllers the test runs
// (deploy/components/NAME, as deploy/ and its overlays compose them) are
// applied with kubectl apply --server-side -k, the controllers get a
// TokenRequest token of the ServiceAccount, which is bound to those
// controllers' roles and no other controller's, and any request the API
// server forbids fails the test. Together they exercise every controller's reads
// and writes, and leader election; each runs once, with those credentials
// only (running them again as admin would test nothing more).
//
// TestServiceAccountScenariosCoverEveryController (pkg/manifests, a unit
// test) reads this list and the calls from this directory's sources, so it
// stays a map literal of string literals and string constants.
var serviceAccountScenarios = map[string][]string{
	"TestNodeFailureEvictionAndRecovery":           {"nodelifecycle", "tainteviction"}, // taints, pod NotReady, eviction
	"TestReadinessRestored":                        {"nodelifecycle"},                  // pod readiness restored
	"TestTwoReplicasOneLeader":                     {leaderElection},                   // a Lease in nodeshepherd-system
	"TestNodeIPAMReuseExhaustionAndRestart":        {"nodeipam"},
	"TestMachineDeletedNodeRemovedAndPodsReplaced": {"cloudnodelifecycle"},     // node deletion
	"TestMachineShutdownTaint":                     {"cloudnodelifecycle"},     // shutdown taint
	"TestDrainCordonDrainUncordon":                 {"drain"},                  // cordon, condition, Eviction API, uncordon
	"TestDrainBlockedByPDBExplainedThenForced":     {"drain"},                  // PDB reads, blocked-since annotation, force-after pod deletion
	"TestDrainMovesBeforeEvicting":                 {"drain"},                  // Deployment surge and scale-back, pod-deletion-cost, Namespace and HPA reads
	"TestDrainDoesNotSurgeReadWriteOnceClaim":      {"drain"},                  // PersistentVolumeClaim reads (move-before-evict)
	"TestSchedulerPreemption":                      {"scheduler"},              // binding, status, preemption, PDBs
	"TestOutOfServiceAnnotationForceDeletesPods":   {"outofservice"},           // taint and annotations added, then removed
	"TestCompanionReadinessRestore":                {"readinessrestore"},       // pods/status next to kube-controller-manager
	"TestRemediationRebootThenReplace":             {"remediation"},            // policies and their status, taints and records, provider requests
	"TestOrphanedOwnerRecordsExpire":               {"nodelifecycle", "drain"}, // the janitor's reads and lifts with nodelifecycle's role only; the drain's renewal
}

const leaderElection = "leader election"

// asServiceAccount runs the rest of the test's controllers as deploy/'s
// ServiceAccount; the test must be listed in serviceAccountScenarios.
func asServiceAccount(t *testing.T) {
	t.Helper()
	if _, ok := serviceAccountScenarios[t.Name()]; !ok {
		t.Fatalf("%s runs as deploy/'s ServiceAccount but is not listed in serviceAccountScenarios", t.Name())
	}
	framework.RunAsServiceAccount(t)
}
