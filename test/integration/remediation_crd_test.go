package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/remediation"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// TestRemediationPolicyCRD (issue 33, point 1): the CustomResourceDefinition
// is accepted by kube-apiserver; a policy per common case is stored and
// reads back into the Go types, valid by Validate too; policies that
// Validate refuses are refused by the API server, each naming its field;
// kubectl get shows the pool's counts.
// installRemediationCRD creates the RemediationPolicy CRD and waits until
// it is established and its resource served; it returns the resource.
func installRemediationCRD(t *testing.T, dyn dynamic.Interface) dynamic.NamespaceableResourceInterface {
	t.Helper()
	if err := remediation.InstallCRD(framework.Context(t), dyn, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	policies := dyn.Resource(remediation.GroupVersionResource)
	return policies
}

func TestRemediationPolicyCRD(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{})
	dyn := dynamic.NewForConfigOrDie(cp.RESTConfig())
	policies := installRemediationCRD(t, dyn)
	create := func(doc string) (*unstructured.Unstructured, error) {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		var out *unstructured.Unstructured
		var err error
		// The discovery of a new resource may lag its Established condition.
		framework.Eventually(t, 30*time.Second, "the policies resource served", func(ctx context.Context) (bool, string, error) {
			out, err = policies.Create(ctx, &u, metav1.CreateOptions{})
			return err == nil || !strings.Contains(err.Error(), "the server could not find the requested resource"), "", nil
		})
		return out, err
	}

	// Every example of docs/remediation.md is accepted, reads back into the
	// Go types and passes Validate too.
	examples, err := filepath.Glob(filepath.Join(framework.RepoRoot(t), "examples", "remediation", "*.yaml"))
	if err != nil || len(examples) < 3 {
		t.Fatalf("examples/remediation: %v, %v", examples, err)
	}
	for _, file := range examples {
		doc, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		stored, err := create(string(doc))
		if err != nil {
			t.Errorf("%s refused: %v", file, err)
			continue
		}
		var p remediation.RemediationPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(stored.Object, &p); err != nil {
			t.Fatal(err)
		}
		if errs := p.Spec.Validate(field.NewPath("spec")); len(errs) != 0 || len(p.Spec.Steps) == 0 {
			t.Errorf("%s read back: %+v, %v", file, p.Spec, errs)
		}
		if p.Name == "general" && (p.Spec.Steps[1].Timeout.Duration != 30*time.Minute || p.Spec.Brakes.MaxInRepair.String() != "20%" ||
			p.Spec.Brakes.MaxInRepairPerZone.IntValue() != 1) {
			t.Errorf("general read back: %+v", p.Spec)
		}
	}

	for name, c := range map[string]struct{ mut, want string }{
		"unknown action":      {`- {action: Reimage, timeout: 10m}`, "spec.steps[1].action: Unsupported value"},
		"taint step no taint": {`- {action: Taint, timeout: 10m}`, "a Taint step has a taint"},
		"drain with a taint":  {`- {action: Drain, timeout: 10m, taint: {key: a, effect: NoSchedule}}`, "a Taint step has a taint"},
		"timeout too short":   {`- {action: Drain, timeout: 5s}`, "at least 10s"},
		"timeout below hold":  {`- {action: Drain, timeout: 90s}`, "at least healthyHold"},
		"bad percentage":      {`  brakes: {maxInRepair: twenty}`, "spec.brakes.maxInRepair"},
		"above 100%":          {`  brakes: {maxUnhealthy: 150%}`, "spec.brakes.maxUnhealthy"},
		"PreferNoSchedule":    {`- {action: Taint, timeout: 10m, taint: {key: a, effect: PreferNoSchedule}}`, "spec.steps[1].taint.effect"},
		// A reserved key: the out-of-service taint with no confirmation of
		// death (issue 46 point 5).
		"out-of-service taint": {`- {action: Taint, timeout: 10m, taint: {key: node.kubernetes.io/out-of-service, effect: NoExecute}}`, "is reserved for Kubernetes"},
		"Ready staleAfter 1m":  {`  unhealthy: [{type: Ready, status: Unknown, for: 5m, staleAfter: 1m}]`, "staleAfter on Ready must be at least 5m"},
		"cloud provider taint": {`- {action: Taint, timeout: 10m, taint: {key: node.cloudprovider.kubernetes.io/shutdown, effect: NoSchedule}}`, "is reserved for Kubernetes"},
	} {
		doc := `
apiVersion: nodeshepherd.io/v1alpha1
kind: RemediationPolicy
metadata: {name: bad}
spec:
  unhealthy: [{type: Ready, status: Unknown, for: 5m}]
  healthyHold: 2m
  steps:
  - {action: Drain, timeout: 10m}
`
		switch {
		case strings.HasPrefix(c.mut, "  unhealthy"):
			doc = strings.Replace(doc, "  unhealthy: [{type: Ready, status: Unknown, for: 5m}]", c.mut, 1)
		case strings.HasPrefix(c.mut, "  brakes"):
			doc += c.mut + "\n"
		default:
			doc += "  " + c.mut + "\n"
		}
		if _, err := create(doc); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal with %q", name, err, c.want)
		}
	}

	out := framework.Kubectl(t, cp.RESTConfig(), "get", "remediationpolicies")
	for _, col := range []string{"NAME", "NODES", "UNHEALTHY", "IN REPAIR", "BLOCKED", "general"} {
		if !strings.Contains(out, col) {
			t.Errorf("kubectl get remediationpolicies lacks %q:\n%s", col, out)
		}
	}
}

// remediationRig is a control plane with the RemediationPolicy CRD, one
// policy, and fake nodes labelled with its pool, Ready (no node lifecycle
// controller runs in these tests: Ready is enough).
type remediationRig struct {
	cp       *controlplane.ControlPlane
	client   kubernetes.Interface
	dyn      dynamic.Interface
	policies dynamic.NamespaceableResourceInterface
	m        *fakenode.Manager
	names    []string
}

// startRemediationRig starts it: policy is the RemediationPolicy's YAML,
// downtime the fake machines' reboot and replace downtimes (0: the
// defaults).
func startRemediationRig(t *testing.T, policy, pool string, nodes int, downtime time.Duration) remediationRig {
	t.Helper()
	return startRemediationRigOn(t, controlplane.Config{}, policy, pool, nodes, downtime)
}

// startRemediationRigOn is startRemediationRig on a control plane of cpc
// (kube-controller-manager for PodDisruptionBudgets' status, say).
func startRemediationRigOn(t *testing.T, cpc controlplane.Config, policy, pool string, nodes int, downtime time.Duration) remediationRig {
	t.Helper()
	r := remediationRig{cp: framework.StartControlPlane(t, cpc)}
	r.client = framework.Client(t, r.cp)
	r.dyn = dynamic.NewForConfigOrDie(r.cp.RESTConfig())
	r.policies = installRemediationCRD(t, r.dyn)
	var pol unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(policy), &pol.Object); err != nil {
		t.Fatal(err)
	}
	if _, err := r.policies.Create(framework.Context(t), &pol, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the policy: %v", err)
	}
	cfg := fastNodes(r.client, nodes, false)
	cfg.Labels = map[string]string{"pool": pool}
	if downtime > 0 {
		cfg.RebootDowntime, cfg.ReplaceDowntime = downtime, downtime
	}
	r.m = framework.StartFakeNodes(t, cfg)
	r.names = r.m.NodeNames()
	for _, n := range r.names {
		framework.Eventually(t, time.Minute, n+" Ready", nodeCondition(r.client, n, v1.NodeReady, v1.ConditionTrue))
	}
	return r
}
