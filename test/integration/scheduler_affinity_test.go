package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

const zoneKey = "topology.kubernetes.io/zone"

// affinityPod is one pod of the inter-pod affinity workload.
type affinityPod struct {
	name, ns  string
	labels    map[string]string
	affinity  *v1.Affinity
	scheduled bool // expected outcome
}

func podTerm(key string, match map[string]string) v1.PodAffinityTerm {
	return v1.PodAffinityTerm{TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: match}}
}

// affinityWorkload is created in stages: each stage's pods settle before
// the next stage, so that the outcome does not depend on creation races.
func affinityWorkload() [][]affinityPod {
	app := func(a string) map[string]string { return map[string]string{"app": a} }
	var web, cache, self, batch, canary []affinityPod
	for i := range 4 {
		// One per node, in the zone of the database: 2 fit.
		web = append(web, affinityPod{name: fmt.Sprintf("web-%d", i), labels: app("web"), scheduled: i < 2, affinity: &v1.Affinity{
			PodAffinity:     &v1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{podTerm(zoneKey, app("db"))}},
			PodAntiAffinity: &v1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{podTerm(v1.LabelHostname, app("web"))}}}})
		// One per zone: 3 fit.
		cache = append(cache, affinityPod{name: fmt.Sprintf("cache-%d", i), labels: app("cache"), scheduled: i < 3, affinity: &v1.Affinity{
			PodAntiAffinity: &v1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{podTerm(zoneKey, app("cache"))}}}})
		// Kept out of the guard's zone by the guard's anti-affinity.
		batch = append(batch, affinityPod{name: fmt.Sprintf("batch-%d", i), labels: app("batch"), scheduled: true})
	}
	for i := range 2 {
		// Affinity to their own group: the first goes anywhere.
		self = append(self, affinityPod{name: fmt.Sprintf("self-%d", i), labels: app("self"), scheduled: true, affinity: &v1.Affinity{
			PodAffinity: &v1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{podTerm(zoneKey, app("self"))}}}})
	}
	for i, version := range []string{"v1", "v1", "v1", "v1", "v1", "v1", "v1", "v2"} {
		// matchLabelKeys: one per node per version; 6 nodes, 7 v1 pods.
		term := podTerm(v1.LabelHostname, app("canary"))
		term.MatchLabelKeys = []string{"version"}
		canary = append(canary, affinityPod{name: fmt.Sprintf("canary-%d", i), labels: map[string]string{"app": "canary", "version": version},
			scheduled: i != 6, affinity: &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{term}}}})
	}
	tenantTerm := podTerm(v1.LabelHostname, app("tenant-db"))
	tenantTerm.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
	return [][]affinityPod{
		{{name: "db", labels: app("db"), scheduled: true},
			{name: "guard", labels: app("guard"), scheduled: true, affinity: &v1.Affinity{
				PodAntiAffinity: &v1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{podTerm(zoneKey, app("batch"))}}}},
			{name: "tenant-db", ns: "tenant", labels: app("tenant-db"), scheduled: true}},
		append(append(append(web, cache...), batch...), self[0]),
		append(self[1:], canary...),
		{{name: "follower", labels: app("follower"), scheduled: true, affinity: &v1.Affinity{
			PodAffinity: &v1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{tenantTerm}}}},
			{name: "nowhere", labels: app("nowhere"), scheduled: false, affinity: &v1.Affinity{
				PodAffinity: &v1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{podTerm(zoneKey, app("missing"))}}}}},
	}
}

// affinityOutcome is where each pod went ("" pending) and, for pending
// pods, the PodScheduled message.
type affinityOutcome struct {
	node, msg map[string]string
}

func runAffinityWorkload(t *testing.T, upstream bool) affinityOutcome {
	c := startPreemptionCluster(t, 6, upstream, nil)
	ctx := framework.Context(t)
	for i, n := range c.nodes {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"zone-%d"}}}`, zoneKey, i/2)
		if _, err := c.client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant",
		Labels: map[string]string{"team": "a"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "zone labels", func(ctx context.Context) (bool, string, error) {
		nodes, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: zoneKey})
		if err != nil {
			return false, "", err
		}
		return len(nodes.Items) == 6, fmt.Sprintf("%d labelled", len(nodes.Items)), nil
	})
	out := affinityOutcome{node: map[string]string{}, msg: map[string]string{}}
	for _, stage := range affinityWorkload() {
		for _, ap := range stage {
			p := spec{name: ap.name, milliCPU: 100}.pod(c.nodes, v1.DefaultSchedulerName)
			p.Labels, p.Spec.Affinity = ap.labels, ap.affinity
			ns := "default"
			if ap.ns != "" {
				p.Namespace, ns = ap.ns, ap.ns
			}
			// Retried: the namespace's default service account appears
			// shortly after the namespace.
			framework.Eventually(t, 30*time.Second, "pod "+ap.name+" created", func(ctx context.Context) (bool, string, error) {
				_, err := c.client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
				return err == nil || apierrors.IsAlreadyExists(err), fmt.Sprint(err), nil
			})
		}
		for _, ap := range stage {
			ns := "default"
			if ap.ns != "" {
				ns = ap.ns
			}
			framework.Eventually(t, 60*time.Second, ap.name+" settled", func(ctx context.Context) (bool, string, error) {
				p, err := c.client.CoreV1().Pods(ns).Get(ctx, ap.name, metav1.GetOptions{})
				if err != nil {
					return false, "", err
				}
				out.node[ap.name] = p.Spec.NodeName
				if p.Spec.NodeName != "" {
					return true, "", nil
				}
				cond := kube.PodCondition(p, v1.PodScheduled)
				if cond == nil || cond.Reason != v1.PodReasonUnschedulable {
					return false, "no verdict", nil
				}
				out.msg[ap.name] = cond.Message
				return !ap.scheduled, "pending: " + cond.Message, nil
			})
		}
	}
	// A pod waiting for its affinity target is woken when the target is
	// bound (AssignedPodAdd), long before the unschedulable pool's flush.
	early := spec{name: "early", milliCPU: 100}.pod(c.nodes, v1.DefaultSchedulerName)
	early.Spec.Affinity = &v1.Affinity{PodAffinity: &v1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{
		podTerm(v1.LabelHostname, map[string]string{"app": "late"})}}}
	c.create(t, early)
	waitUnschedulable(t, c, "early", "didn't match pod affinity rules")
	late := spec{name: "late", milliCPU: 100, app: "late"}.pod(c.nodes, v1.DefaultSchedulerName)
	c.create(t, late)
	waitRunningOn(t, c, "late", "")
	waitRunningOn(t, c, "early", podGet(t, c, "late").Spec.NodeName)

	// Pending pods stay pending: settle on a final probe scheduled after them.
	probe := spec{name: "probe", milliCPU: 100}.pod(c.nodes, v1.DefaultSchedulerName)
	c.create(t, probe)
	waitRunningOn(t, c, "probe", "")
	all, err := c.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range all.Items {
		if _, ok := out.node[p.Name]; ok {
			out.node[p.Name] = p.Spec.NodeName
		}
	}
	checkAffinityPlacement(t, c, out)
	return out
}

// checkAffinityPlacement checks every placement against the constraints.
func checkAffinityPlacement(t *testing.T, c *preemptionCluster, out affinityOutcome) {
	t.Helper()
	zone := func(node string) string {
		for i, n := range c.nodes {
			if n == node {
				return fmt.Sprintf("zone-%d", i/2)
			}
		}
		return ""
	}
	placed := func(prefix string) (nodes, zones []string) {
		for _, name := range slices.Sorted(maps.Keys(out.node)) {
			if n := out.node[name]; n != "" && len(name) > len(prefix) && name[:len(prefix)] == prefix {
				nodes, zones = append(nodes, n), append(zones, zone(n))
			}
		}
		return nodes, zones
	}
	distinct := func(s []string) bool { return len(slices.Compact(slices.Sorted(slices.Values(s)))) == len(s) }
	webNodes, webZones := placed("web-")
	if !distinct(webNodes) {
		t.Errorf("web pods share a node: %v", webNodes)
	}
	for _, z := range webZones {
		if z != zone(out.node["db"]) {
			t.Errorf("web pod in %s, db in %s", z, zone(out.node["db"]))
		}
	}
	if _, zones := placed("cache-"); !distinct(zones) {
		t.Errorf("cache pods share a zone: %v", zones)
	}
	if _, zones := placed("batch-"); slices.Contains(zones, zone(out.node["guard"])) {
		t.Errorf("batch pods %v in the guard's zone %s", zones, zone(out.node["guard"]))
	}
	if _, zones := placed("self-"); len(zones) == 2 && zones[0] != zones[1] {
		t.Errorf("self pods in different zones: %v", zones)
	}
	var v1Nodes []string
	for i := range 7 {
		if n := out.node[fmt.Sprintf("canary-%d", i)]; n != "" {
			v1Nodes = append(v1Nodes, n)
		}
	}
	if !distinct(v1Nodes) {
		t.Errorf("canary v1 pods share a node: %v", v1Nodes)
	}
	if out.node["follower"] != out.node["tenant-db"] {
		t.Errorf("follower on %s, tenant-db on %s", out.node["follower"], out.node["tenant-db"])
	}
}

// TestSchedulerInterPodAffinityMatchesKubeScheduler runs the same workload
// (3 zones x 2 nodes; anti-affinity per hostname and zone, affinity to
// another app and to its own, the symmetry of an existing pod's
// anti-affinity, matchLabelKeys, namespaceSelector) through kube-scheduler
// and through nodeshepherd, and requires the same pods scheduled and
// pending, the same messages for the pending ones, and every placement
// within the constraints.
func TestSchedulerInterPodAffinityMatchesKubeScheduler(t *testing.T) {
	results := map[bool]affinityOutcome{}
	for _, upstream := range []bool{true, false} {
		who := map[bool]string{true: "kube-scheduler", false: "nodeshepherd"}[upstream]
		t.Run(who, func(t *testing.T) {
			results[upstream] = runAffinityWorkload(t, upstream)
		})
	}
	// Which pod of a group stays pending depends on the order the
	// scheduler sees them; how many, and why, does not.
	want := map[string]int{}
	for _, stage := range affinityWorkload() {
		for _, ap := range stage {
			want[group(ap.name)] += 0
			if ap.scheduled {
				want[group(ap.name)]++
			}
		}
	}
	summary := func(out affinityOutcome) (map[string]int, map[string][]string) {
		got, msgs := map[string]int{}, map[string][]string{}
		for name, node := range out.node {
			if node != "" {
				got[group(name)]++
			} else {
				msgs[group(name)] = append(msgs[group(name)], out.msg[name])
			}
		}
		for _, m := range msgs {
			slices.Sort(m)
		}
		return got, msgs
	}
	ksGot, ksMsgs := summary(results[true])
	nsGot, nsMsgs := summary(results[false])
	for g, n := range want {
		if ksGot[g] != n || nsGot[g] != n {
			t.Errorf("%s: %d scheduled by kube-scheduler, %d by nodeshepherd, want %d", g, ksGot[g], nsGot[g], n)
		}
	}
	for g := range want {
		if len(nsMsgs[g]) > 0 {
			t.Logf("%s pending: %q", g, nsMsgs[g])
		}
		if !slices.Equal(ksMsgs[g], nsMsgs[g]) {
			t.Errorf("%s: pending messages\nkube-scheduler: %q\nnodeshepherd:   %q", g, ksMsgs[g], nsMsgs[g])
		}
	}
}

// group is a pod's name without its "-<index>" suffix.
func group(name string) string {
	if i := strings.LastIndexByte(name, '-'); i > 0 && strings.Trim(name[i+1:], "0123456789") == "" {
		return name[:i]
	}
	return name
}
