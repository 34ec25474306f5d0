package integration

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/simulate"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

const snapshotSecret = "hunter2-do-not-leak"

// TestScenarioSnapshot snapshots a live cluster (a control plane with fake
// nodes in two zones, node pools with labels and taints, and a workload of
// every kind, one of which reads a Secret) with the CLI, checks the files,
// and runs the scenario written.
func TestScenarioSnapshot(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{})
	client := framework.Client(t, cp)
	ctx := framework.Context(t)
	dedicated := []v1.Taint{{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoSchedule}}
	gpus := []fakenode.DeviceSet{{Driver: "gpu.fake.nodeshepherd.io", Count: 2, Model: "a100"}}
	framework.StartFakeNodes(t, fakenode.Config{Client: client, Groups: []fakenode.NodeGroup{
		{Name: "web-a", Zone: "zone-a", Count: 3, Labels: map[string]string{"pool": "web"}, CPU: resource.MustParse("8")},
		{Name: "db-a", Zone: "zone-a", Count: 1, Labels: map[string]string{"pool": "db"}, Taints: dedicated, CPU: resource.MustParse("16"), Devices: gpus},
		{Name: "web-b", Zone: "zone-b", Count: 3, Labels: map[string]string{"pool": "web"}, CPU: resource.MustParse("8")},
		{Name: "db-b", Zone: "zone-b", Count: 1, Labels: map[string]string{"pool": "db"}, Taints: dedicated, CPU: resource.MustParse("16"), Devices: gpus},
	}})
	createSnapshotWorkloads(t, client)
	// A claim template of the workloads' namespace, for the db nodes' GPUs.
	rct := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "one-gpu", Namespace: "shop"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
			{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.fake.nodeshepherd.io"}}}}}}}
	if _, err := client.ResourceV1().ResourceClaimTemplates("shop").Create(ctx, rct, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	bin := framework.Binary(t)
	out := filepath.Join(t.TempDir(), "my-cluster")
	snapshot := func(args ...string) (string, error) {
		b, err := framework.CommandContext(ctx, bin, append([]string{"scenario", "snapshot", "--kubeconfig", cp.KubeconfigPath()}, args...)...).CombinedOutput()
		return string(b), err
	}
	text, err := snapshot("-o", out, "--scale", "0.5")
	t.Logf("snapshot:\n%s", text)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	for _, want := range []string{"Nodes: 6 in 2 zones, 4 node groups", "zone-a               3 nodes (cluster: 4)",
		"1 Deployments and 1 StatefulSets (4 replicas in all), 1 DaemonSets, 1 PodDisruptionBudgets, 1 PriorityClasses in 1 namespaces",
		"Settings: ConfigMap nodeshepherd-system/nodeshepherd-config-h4sh", "1 env values from Secrets or ConfigMaps removed",
		`storage class "standard" replaced by fake-csi`,
		"Devices: 2 of gpu.fake.nodeshepherd.io a node (zone-a-"} {
		if !strings.Contains(text, want) {
			t.Errorf("summary lacks %q", want)
		}
	}

	// No Secret data anywhere, and no reference to it in the manifests.
	files := 0
	err = filepath.Walk(out, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		files++
		data, err := os.ReadFile(p)
		if strings.Contains(string(data), snapshotSecret) || strings.Contains(string(data), "secretKeyRef") {
			t.Errorf("%s holds the Secret's value or a reference to it:\n%s", p, data)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if files != 3 { // scenario.yaml, workloads/priorityclasses.yaml, workloads/ns-shop.yaml
		t.Errorf("%d files written, want 3", files)
	}
	scenarioFile := filepath.Join(out, "scenario.yaml")
	sc, err := simulate.Load(scenarioFile)
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]simulate.NodeGroup{}
	for _, g := range sc.Cluster.NodeGroups {
		groups[g.Zone+"/"+g.Labels["pool"]] = g
		if _, ok := g.Labels[v1.LabelHostname]; ok {
			t.Errorf("group %s keeps kubernetes.io/hostname", g.Name)
		}
	}
	if g := groups["zone-a/db"]; g.Nodes != 1 || g.Shape.CPU.String() != "16" || len(g.Taints) != 1 || g.Taints[0].Key != "dedicated" {
		t.Errorf("zone-a's db group %+v: want 1 node, 16 cpu, the dedicated taint only (not the not-ready taint of the moment)", g)
	}
	if g := groups["zone-b/web"]; g.Nodes != 2 || g.Shape.CPU.String() != "8" || len(g.Taints) != 0 {
		t.Errorf("zone-b's web group %+v: want 2 nodes (3 halved, rounded up), 8 cpu, no taints", g)
	}
	// The db nodes' fake GPUs (their ResourceSlices): one cluster.devices
	// entry for both db groups; the class is the fake nodes' own (named
	// after the driver), so none is written.
	if d := sc.Cluster.Devices; len(d) != 1 || d[0].Driver != "gpu.fake.nodeshepherd.io" || d[0].Count != 2 || d[0].Model != "a100" ||
		d[0].Class != "" || !slices.Equal(d[0].NodeGroups, []string{groups["zone-a/db"].Name, groups["zone-b/db"].Name}) {
		t.Errorf("cluster.devices %+v: want the db groups' 2 fake GPUs", d)
	}
	data, _ := os.ReadFile(scenarioFile)
	if shop, err := os.ReadFile(filepath.Join(out, "workloads", "ns-shop.yaml")); err != nil || !strings.Contains(string(shop), "kind: ResourceClaimTemplate") {
		t.Errorf("ns-shop.yaml lacks the ResourceClaimTemplate: %v\n%s", err, shop)
	}
	if !strings.Contains(string(data), "nodeMonitorGracePeriod: 30s") || strings.Contains(string(data), "leaderElect") {
		t.Errorf("controllers: block is not nodeshepherd's controller settings:\n%s", data)
	}

	// A second snapshot to the same place is a usage error, --force replaces it.
	if _, err := snapshot("-o", out); exitCode(err) != 2 {
		t.Errorf("snapshot into an existing output: exit %d, want 2", exitCode(err))
	}
	if text, err := snapshot("-o", out, "--force", "--scale", "0.5"); err != nil {
		t.Errorf("--force: %v\n%s", err, text)
	}
	if text, err := framework.CommandContext(ctx, bin, "scenario", "snapshot", "--kubeconfig", cp.KubeconfigPath(), "--server", "x").CombinedOutput(); exitCode(err) != 2 {
		t.Errorf("unknown flag: exit %d, want 2\n%s", exitCode(err), text)
	}

	// A namespace the cluster does not have is a usage error, with nothing written.
	typo := filepath.Join(t.TempDir(), "typo")
	if text, err := snapshot("-o", typo, "--namespace", "shop,shpo"); exitCode(err) != 2 || !strings.Contains(text, `--namespace: namespace(s) shpo not found`) {
		t.Errorf("--namespace shop,shpo: exit %d, want 2 naming shpo:\n%s", exitCode(err), text)
	}
	if _, err := os.Stat(typo); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused snapshot left %s behind", typo)
	}

	// The scenario runs as written, but shorter, next to upstream: both runs
	// get the same node groups.
	short := strings.Replace(strings.Replace(string(data), "duration: 5m", "duration: 1m", 1), "{at: 1m, action: network-blip", "{at: 10s, action: network-blip", 1)
	if err := os.WriteFile(scenarioFile, []byte(short), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := framework.CommandContext(ctx, bin, "simulate", scenarioFile, "--time-scale", "10", "--compare", "upstream", "-o", filepath.Join(t.TempDir(), "report")).CombinedOutput()
	t.Logf("simulate:\n%s", b)
	if err != nil {
		t.Fatalf("simulate of the snapshot: %v", err)
	}
	// The placeholder step targets the first node group, whose nodes are
	// numbered first.
	if !regexp.MustCompile(`▶ network-blip on 1 nodes of group ` + regexp.QuoteMeta(sc.Cluster.NodeGroups[0].Name) + ` .*fake-node-0000`).Match(b) {
		t.Errorf("simulate's output lacks the blip of the first node group %s's first node", sc.Cluster.NodeGroups[0].Name)
	}
	for _, want := range []string{"[nodeshepherd] 6/6 nodes Ready", "[upstream] 6/6 nodes Ready", "[nodeshepherd] 10/10 pods Ready", "[upstream] 10/10 pods Ready"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("simulate's output lacks %q", want)
		}
	}
}

// TestScenarioSnapshotErrors: an unreachable cluster is an error naming the
// server (exit 1), a bad flag a usage error (exit 2); neither leaves files.
func TestScenarioSnapshotErrors(t *testing.T) {
	bin := framework.Binary(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: gone, context: {cluster: c, user: u}}]
current-context: gone
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	b, err := framework.Command(bin, "scenario", "snapshot", "--kubeconfig", kubeconfig, "-o", out).CombinedOutput()
	if exitCode(err) != 1 || !strings.Contains(string(b), "reading the cluster at https://127.0.0.1:1") {
		t.Errorf("unreachable cluster: exit %d, output:\n%s", exitCode(err), b)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed snapshot left %s behind", out)
	}
	for _, args := range [][]string{{"--scale", "2", "-o", out}, {}, {"-o", "/proc/nope/out"}} {
		b, err := framework.Command(bin, append([]string{"scenario", "snapshot", "--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
		if exitCode(err) != 2 {
			t.Errorf("%v: exit %d, want 2:\n%s", args, exitCode(err), b)
		}
	}
}

func exitCode(err error) int {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// createSnapshotWorkloads creates namespace shop with a Deployment reading
// a Secret, its PDB, a StatefulSet on the tainted pool, a DaemonSet, a
// PriorityClass, and nodeshepherd's ConfigMap; kube-system gets a DaemonSet
// the snapshot must leave out.
func createSnapshotWorkloads(t *testing.T, c kubernetes.Interface) {
	ctx := framework.Context(t)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{"shop", simulate.DefaultNodeShepherdNamespace} {
		must(c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	}
	must(c.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "shop-high"}, Value: 1000}, metav1.CreateOptions{}))
	must(c.CoreV1().Secrets("shop").Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-creds"},
		StringData: map[string]string{"password": snapshotSecret}}, metav1.CreateOptions{}))
	must(c.CoreV1().ConfigMaps(simulate.DefaultNodeShepherdNamespace).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "nodeshepherd-config-h4sh"},
		Data: map[string]string{"config.yaml": "apiVersion: nodeshepherd.io/v1alpha1\nkind: NodeShepherdConfiguration\nleaderElection: {leaderElect: true}\n" +
			"nodeLifecycle: {nodeMonitorGracePeriod: 30s}\nscheduler: {schedulerName: nodeshepherd-scheduler}\n"}}, metav1.CreateOptions{}))
	pod := func(app string) v1.PodTemplateSpec {
		return v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}}, Spec: v1.PodSpec{
			Containers: []v1.Container{{Name: app, Image: "registry.k8s.io/pause:3.10",
				Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m")}}}}}}
	}
	web := pod("web")
	web.Spec.PriorityClassName = "shop-high"
	web.Spec.NodeSelector = map[string]string{"pool": "web"}
	web.Spec.Containers[0].Env = []v1.EnvVar{{Name: "DB_PASSWORD", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "db-creds"}, Key: "password"}}}}
	web.Spec.TopologySpreadConstraints = []v1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: v1.LabelTopologyZone,
		WhenUnsatisfiable: v1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	sel := func(app string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	}
	must(c.AppsV1().Deployments("shop").Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](6), Selector: sel("web"), Template: web}}, metav1.CreateOptions{}))
	must(c.PolicyV1().PodDisruptionBudgets("shop").Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(4)), Selector: sel("web")}}, metav1.CreateOptions{}))
	db := pod("db")
	db.Spec.NodeSelector = map[string]string{"pool": "db"}
	db.Spec.Tolerations = []v1.Toleration{{Key: "dedicated", Operator: v1.TolerationOpEqual, Value: "db", Effect: v1.TaintEffectNoSchedule}}
	db.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	must(c.AppsV1().StatefulSets("shop").Create(ctx, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2), ServiceName: "db", Selector: sel("db"), Template: db,
			VolumeClaimTemplates: []v1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}, Spec: v1.PersistentVolumeClaimSpec{
				StorageClassName: ptr.To("standard"), AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
				Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}}}}}}, metav1.CreateOptions{}))
	agent := pod("agent")
	agent.Spec.Tolerations = []v1.Toleration{{Operator: v1.TolerationOpExists}}
	for _, ns := range []string{"shop", metav1.NamespaceSystem} {
		must(c.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent"},
			Spec: appsv1.DaemonSetSpec{Selector: sel("agent"), Template: agent}}, metav1.CreateOptions{}))
	}
}
