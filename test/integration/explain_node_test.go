package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/outofservice"
	"github.com/nodeshepherd/nodeshepherd/pkg/explain"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// explainConfig is the configuration file explain judges nodes by: the
// timings the in-process controllers run with (drainConfig, fastLifecycle).
const explainConfig = `apiVersion: nodeshepherd.io/v1alpha1
kind: NodeShepherdConfiguration
shared:
  nodeMonitorPeriod: 1s
nodeLifecycle:
  nodeMonitorGracePeriod: 3s
  nodeStartupGracePeriod: 5s
drain:
  drainCondition: ["KernelDeadlock=True,3s"]
  maxConcurrentDrains: 0
  maxCordonedNodes: "100%"
`

// runExplain runs the binary (under the name argv0 links to) and returns
// its output (stdout and stderr) and exit code.
func runExplain(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	code, stdout, stderr := framework.RunBinary(t, bin, args...)
	return stdout + stderr, code
}

// explainJSON runs `nodeshepherd explain ARGS -o json` and decodes its
// answer.
func explainJSON[T any](t *testing.T, args ...string) *T {
	t.Helper()
	code, out, stderr := framework.RunBinary(t, framework.Binary(t), append(append([]string{"explain"}, args...), "-o", "json")...)
	if code != 0 {
		t.Fatalf("explain %s: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
	v := new(T)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("explain %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
	return v
}

// TestExplainNodeStates: `explain node` on the local control plane, with
// nodeshepherd's controllers running, in each state a node can be in: healthy,
// silent and tainted with its pods' eviction times, cordoned by a human,
// drained but blocked by a PodDisruptionBudget, out of service. It only
// reads: every request it sends through the proxy is a GET.
func TestExplainNodeStates(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 5, false))
	conf := drainConfig(func(d *drain.Config) { d.DrainTimeout = 5 * time.Minute })
	framework.StartNodeShepherd(t, cfg, oosConfig(conf, 1), withOutOfService)
	names := m.NodeNames()
	healthy, silent, human, blocked, dead := names[0], names[1], names[2], names[3], names[4]
	waitNodesReady(t, client, names...)
	ctx := framework.Context(t)

	// Pods where each state needs them: web (2 replicas, a PDB that allows
	// no disruption) on the node to drain, one pod on the node to silence.
	web := deployment("web", 2)
	web.Spec.Template.Spec.NodeName = blocked
	createDeployment(t, client, web)
	patient := deployment("patient", 1)
	patient.Spec.Template.Spec.NodeName = silent
	createDeployment(t, client, patient)
	framework.Eventually(t, 60*time.Second, "pods ready", func(ctx context.Context) (bool, string, error) {
		ok1, msg1, err := deploymentReady(client, "web", 2)(ctx)
		ok2, msg2, _ := deploymentReady(client, "patient", 1)(ctx)
		return ok1 && ok2, msg1 + " " + msg2, err
	})
	createPDB(t, client, "web", ptr.To(intstr.FromInt32(2)), nil)

	// A human cordons one node (as kubectl cordon, its field manager);
	// both it and the node to drain then report KernelDeadlock.
	humanCfg := rest.CopyConfig(cfg)
	humanCfg.UserAgent = "kubectl-cordon"
	humanClient := kubernetes.NewForConfigOrDie(humanCfg)
	if _, err := humanClient.CoreV1().Nodes().Patch(ctx, human, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// And taints it, as kubectl taint would: someone else's taint.
	foreign := v1.Taint{Key: "example.com/maintenance", Value: "disk", Effect: v1.TaintEffectNoSchedule}
	addTaint(t, humanClient, human, foreign)
	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, human, blocked)
	framework.Eventually(t, 60*time.Second, "a PodDisruptionBudget refused the drain of "+blocked, func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, blocked, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		_, ok := n.Annotations[drain.AnnotationBlockedSince]
		return ok, fmt.Sprint(n.Annotations), nil
	})

	// One node falls silent; another falls silent and a person confirms it dead.
	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{silent, dead}})
	framework.Eventually(t, 30*time.Second, "unreachable NoExecute taint", nodeTainted(client, silent, v1.Taint{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoExecute}, true))
	annotateOutOfService(t, client, dead, ptr.To("power supply failed"))
	framework.Eventually(t, 30*time.Second, "out-of-service taint", nodeTainted(client, dead, outofservice.Taint, true))

	// explain reads through a proxy that logs every request.
	proxy := framework.StartFaultProxy(t, cfg)
	pc := proxy.RESTConfig(cfg)
	kubeconfig := framework.WriteKubeconfig(t, pc.Host, pc.CAData, pc.BearerToken)
	configFile := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(configFile, []byte(explainConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := framework.Binary(t)
	explainNode := func(name string) *explain.NodeExplanation {
		t.Helper()
		return explainJSON[explain.NodeExplanation](t, "node", name, "--kubeconfig", kubeconfig, "--config", configFile)
	}

	t.Run("healthy", func(t *testing.T) {
		e := explainNode(healthy)
		if e.Health.Judgment != explain.JudgmentHealthy || e.Heartbeats.Lease == nil || e.Heartbeats.NodeStatus == nil || e.Heartbeats.Grace != "3s" {
			t.Errorf("health %+v heartbeats %+v", e.Health, e.Heartbeats)
		}
		if e.Settings.Source != "file "+configFile || e.Zone.Name == "" || e.Zone.State != "Normal" || e.Zone.NotReady != 0 {
			t.Errorf("settings %+v zone %+v", e.Settings, e.Zone)
		}
		if len(e.Taints) != 0 || e.Drain.State != "none" || e.OutOfService.State != "in-service" {
			t.Errorf("taints %+v drain %+v out of service %+v", e.Taints, e.Drain, e.OutOfService)
		}
	})

	t.Run("silent", func(t *testing.T) {
		e := explainNode(silent)
		if e.Health.Judgment != explain.JudgmentUnknown || !strings.Contains(e.Health.Message, "fell silent") {
			t.Errorf("health %+v", e.Health)
		}
		if e.Zone.NotReady < 1 || e.Zone.State == "" {
			t.Errorf("zone %+v", e.Zone)
		}
		var noExecute *explain.Taint
		for i, tt := range e.Taints {
			if tt.Key == v1.TaintNodeUnreachable && tt.Effect == string(v1.TaintEffectNoExecute) {
				noExecute = &e.Taints[i]
			}
		}
		if noExecute == nil || noExecute.SetBy == "" || noExecute.SinceFrom != "timeAdded" || !strings.Contains(noExecute.Why, "Ready is Unknown") {
			t.Fatalf("taints %+v", e.Taints)
		}
		// Every taint here is nodelifecycle's, each with its owner record
		// (issue 32, point 3): why, since its timeAdded, until when.
		for _, tt := range e.Taints {
			if o := tt.Owner; o == nil || o.Controller != nodelifecycle.Name || o.Until == "" || tt.Since == nil || !o.Since.Equal(*tt.Since) {
				t.Errorf("taint %s:%s owner %+v, since %v", tt.Key, tt.Effect, tt.Owner, tt.Since)
			}
		}
		if len(e.Evictions) != 1 {
			t.Fatalf("evictions %+v", e.Evictions)
		}
		// The default 300s toleration (DefaultTolerationSeconds admission),
		// counted from the end of timeAdded's second.
		p := e.Evictions[0]
		if want := noExecute.Since.Add(time.Second + 300*time.Second); p.Eviction != explain.EvictAt || p.At == nil || !p.At.Equal(want) ||
			p.TolerationSeconds == nil || *p.TolerationSeconds != 300 {
			t.Errorf("eviction %+v, want at %v", p, want)
		}
	})

	t.Run("human-cordon", func(t *testing.T) {
		e := explainNode(human)
		d := e.Drain
		if d.State != "left-to-human" || d.CordonedByDrain || d.CordonOwner != nil || d.CordonedBy != "kubectl-cordon" || !strings.Contains(d.Summary, "nodeshepherd leaves it") ||
			len(d.Matched) != 1 || d.MatchedSince == nil {
			t.Errorf("drain %+v", d)
		}
		// The person's taint has no owner record: shown as theirs. The
		// unschedulable taint mirroring their cordon is nodelifecycle's.
		for _, tt := range e.Taints {
			switch tt.Key {
			case foreign.Key:
				if tt.Owner != nil {
					t.Errorf("the person's taint shown as nodeshepherd's: %+v", tt.Owner)
				}
			case v1.TaintNodeUnschedulable:
				if tt.Owner == nil || tt.Owner.Controller != nodelifecycle.Name {
					t.Errorf("unschedulable taint owner %+v", tt.Owner)
				}
			}
		}
		out, code := runExplain(t, bin, "explain", "node", human, "--kubeconfig", kubeconfig, "--config", configFile)
		if code != 0 || !strings.Contains(out, "not nodeshepherd's: kubectl-taint") && !strings.Contains(out, "not nodeshepherd's:") || !strings.Contains(out, "someone else (nodeshepherd leaves it)") {
			t.Errorf("explain node %s (exit %d) does not show the person's taint and cordon as theirs:\n%s", human, code, out)
		}
	})

	t.Run("drain-blocked-by-pdb", func(t *testing.T) {
		d := explainNode(blocked).Drain
		if d.State != "draining" || !d.CordonedByDrain || d.ScheduledAt == nil || d.BlockedSince == nil || d.Conditions == "" {
			t.Errorf("drain %+v", d)
		}
		if o := d.CordonOwner; o == nil || o.Controller != drain.Name || !strings.Contains(o.Why, "KernelDeadlock=True") || !strings.Contains(o.Until, "--uncordon-after") ||
			d.CordonedAt == nil || o.Since.Sub(*d.CordonedAt).Abs() > time.Millisecond {
			t.Errorf("cordon owner %+v (cordoned at %v)", d.CordonOwner, d.CordonedAt)
		}
		if len(d.Blockers) != 2 {
			t.Fatalf("blockers %+v", d.Blockers)
		}
		for _, b := range d.Blockers {
			if b.PodDisruptionBudget != "default/web" || b.DisruptionsAllowed != 0 || b.DesiredHealthy != 2 || !strings.Contains(b.Why, "minAvailable 2") {
				t.Errorf("blocker %+v", b)
			}
		}
	})

	t.Run("out-of-service", func(t *testing.T) {
		o := explainNode(dead).OutOfService
		if o.State != "out-of-service" || o.BootID == "" || !strings.Contains(o.ConfirmedBy, "power supply failed") || o.Confirmation == nil || o.Since == nil {
			t.Errorf("out of service %+v", o)
		}
		for _, tt := range explainNode(dead).Taints {
			if tt.Key == v1.TaintNodeOutOfService && (tt.Owner == nil || tt.Owner.Controller != outofservice.Name ||
				!strings.Contains(tt.Owner.Why, "power supply failed") || !strings.Contains(tt.Owner.Until, "reboot")) {
				t.Errorf("out-of-service taint owner %+v", tt.Owner)
			}
		}
	})

	t.Run("table-and-errors", func(t *testing.T) {
		out, code := runExplain(t, bin, "explain", "node", blocked, "--kubeconfig", kubeconfig, "--config", configFile)
		t.Logf("explain node %s:\n%s", blocked, out)
		for _, want := range []string{"Heartbeats:", "Health:", "Taints:", "Evictions", "Drain:", "draining", "default/web", "Out of service:",
			"Cordoned by:", "nodeshepherd's drain controller since", "nodeshepherd nodelifecycle"} {
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("table (exit %d) lacks %q:\n%s", code, want, out)
			}
		}
		if out, code := runExplain(t, bin, "explain", "node", "ghost", "--kubeconfig", kubeconfig); code != 1 || !strings.Contains(out, `node "ghost" not found`) {
			t.Errorf("unknown node: exit %d: %s", code, out)
		}
		if out, code := runExplain(t, bin, "explain", "node", healthy, "--kubeconfig", kubeconfig, "-o", "wide"); code != 2 || !strings.Contains(out, "--output") {
			t.Errorf("bad -o: exit %d: %s", code, out)
		}
		// As a kubectl plugin: the link make build makes, named in usage.
		plugin := filepath.Join(filepath.Dir(bin), "kubectl-shepherd")
		if out, code := runExplain(t, plugin, "explain", "node", "--help"); code != 0 || !strings.Contains(out, "kubectl shepherd explain node NAME") {
			t.Errorf("kubectl-shepherd help: exit %d: %s", code, out)
		}
		if out, code := runExplain(t, plugin, "explain", "node", healthy, "--kubeconfig", kubeconfig, "-o", "yaml"); code != 0 || !strings.Contains(out, "judgment: Healthy") {
			t.Errorf("kubectl-shepherd explain: exit %d: %s", code, out)
		}
	})

	// Writes nothing: every request explain sent was a read.
	reads := 0
	for _, r := range proxy.Log() {
		if r.Method != http.MethodGet {
			t.Errorf("explain sent %s %s", r.Method, r.Path)
		}
		reads++
	}
	if reads == 0 {
		t.Error("no request went through the proxy: was explain pointed at it?")
	}
}
