package integration

import (
	"net/http"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
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
// A controller that no scenario here names is run by
// TestUnlistedControllersAsServiceAccount, from what its descriptor gives
// its tests: a new controller needs no line here, only a scenario of its
// own when its reads and writes need more than that to be exercised.
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
	"TestUnlistedControllersAsServiceAccount":      {unlistedControllers},
}

const (
	leaderElection = "leader election"
	// unlistedControllers stands for the controllers no other scenario names.
	unlistedControllers = "unlisted controllers"
)

// unlistedSettle is how long TestUnlistedControllersAsServiceAccount lets
// the controllers work: their informers have listed before they are ready,
// and their work is there from the start.
const unlistedSettle = 15 * time.Second

// TestUnlistedControllersAsServiceAccount runs, as deploy/'s ServiceAccount,
// the controllers that no other scenario of serviceAccountScenarios names,
// together, with the settings and the work their descriptors give their
// tests (descriptor.Tests, controllers.ForTests; with the controllers they
// need), on two Ready nodes, for unlistedSettle: every read of their
// informers and every write that work makes must be allowed, and they must
// stay healthy. It skips while every controller has a scenario of its own.
func TestUnlistedControllersAsServiceAccount(t *testing.T) {
	asServiceAccount(t)
	listed := map[string]bool{}
	for _, what := range serviceAccountScenarios {
		for _, w := range what {
			listed[w] = true
		}
	}
	var unlisted []string
	for _, name := range controllers.Names {
		if !listed[name] {
			unlisted = append(unlisted, name)
		}
	}
	if len(unlisted) == 0 {
		// Not a skip: nothing is missing, every controller is run as its
		// ServiceAccount by a scenario of its own.
		t.Log("every controller has a scenario of its own in serviceAccountScenarios")
		return
	}
	ctrl, run, err := controllers.ForTests(unlisted)
	if err != nil {
		t.Fatal(err)
	}
	cp := framework.StartControlPlane(t, controlplane.Config{})
	client := framework.Client(t, cp)
	nodes := framework.StartFakeNodes(t, fastNodes(client, 2, false))
	// Pods need the namespace's ServiceAccount, which no controller makes here.
	if _, err := client.CoreV1().ServiceAccounts("default").Create(framework.Context(t), &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	waitNodesReadyOnly(t, client, nodes.NodeNames()...)
	var work [][]byte
	for _, d := range controllers.Registry() {
		if slices.Contains(run, d.Name) && d.CRD != nil {
			work = append(work, d.CRD)
		}
		if slices.Contains(unlisted, d.Name) {
			work = append(work, []byte(d.Tests.Work))
		}
	}
	framework.CreateObjects(t, cp.RESTConfig(), "default", work...) // as admin, as an operator would
	ns := framework.StartNodeShepherd(t, cp.RESTConfig(), ctrl, func(o *manager.Options) { o.Controllers = run })
	t.Logf("running %v (for %v) as deploy/'s ServiceAccount for %v", run, unlisted, unlistedSettle)
	select {
	case <-time.After(unlistedSettle):
	case <-framework.Context(t).Done():
		t.Fatal("the test's context ended")
	}
	resp, err := ns.Get(framework.Context(t), "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz of %v after %v: %s", run, unlistedSettle, resp.Status)
	}
	ns.Stop() // the forbidden requests are counted at the test's end
}

// asServiceAccount runs the rest of the test's controllers as deploy/'s
// ServiceAccount; the test must be listed in serviceAccountScenarios.
func asServiceAccount(t *testing.T) {
	t.Helper()
	if _, ok := serviceAccountScenarios[t.Name()]; !ok {
		t.Fatalf("%s runs as deploy/'s ServiceAccount but is not listed in serviceAccountScenarios", t.Name())
	}
	framework.RunAsServiceAccount(t)
}
