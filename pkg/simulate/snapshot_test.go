package simulate

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func snapNode(name, zone, cpu string, labels map[string]string, taints ...v1.Taint) *v1.Node {
	l := map[string]string{v1.LabelHostname: name, v1.LabelTopologyZone: zone, "node.kubernetes.io/instance-type": "m5.large",
		"example.com/machine-id": name}
	for k, v := range labels {
		l[k] = v
	}
	res := v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse("16Gi"), v1.ResourcePods: resource.MustParse("110")}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}, Spec: v1.NodeSpec{Taints: taints},
		Status: v1.NodeStatus{Allocatable: res, Capacity: res}}
}

const secretValue = "s3cr3t-p4ssw0rd"

// snapshotCluster is a cluster of 7 nodes in 2 zones and a workload of
// each kind, one of whose pods reads a Secret every way a pod can.
func snapshotCluster() []runtime.Object {
	dedicated := v1.Taint{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoSchedule}
	notReady := v1.Taint{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoExecute}
	secretRef := &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "db-creds"}, Key: "password"}}
	template := v1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"env":"` + secretValue + `"}`, "team": "shop"}},
		Spec: v1.PodSpec{
			PriorityClassName:  "high",
			NodeSelector:       map[string]string{"pool": "web"},
			ServiceAccountName: "web-sa",
			SchedulerName:      "nodeshepherd-scheduler",
			RuntimeClassName:   ptr.To("gvisor"),
			ImagePullSecrets:   []v1.LocalObjectReference{{Name: "registry"}},
			Tolerations:        []v1.Toleration{{Key: "dedicated", Operator: v1.TolerationOpEqual, Value: "db", Effect: v1.TaintEffectNoSchedule}},
			Affinity: &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []v1.WeightedPodAffinityTerm{{
				Weight: 10, PodAffinityTerm: v1.PodAffinityTerm{TopologyKey: v1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}}}},
			TopologySpreadConstraints: []v1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: v1.LabelTopologyZone, WhenUnsatisfiable: v1.ScheduleAnyway,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
			Containers: []v1.Container{{Name: "web", Image: "web:1", Args: []string{"--db-password=" + secretValue},
				ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"check", secretValue}}}},
				Resources:      v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")}},
				Env: []v1.EnvVar{{Name: "DB_PASSWORD", ValueFrom: secretRef}, {Name: "API_KEY", Value: secretValue},
					{Name: "MODE", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "web-config"}, Key: "mode"}}},
					{Name: "POD", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
				EnvFrom:      []v1.EnvFromSource{{SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "db-creds"}}}},
				VolumeMounts: []v1.VolumeMount{{Name: "creds", MountPath: "/creds"}, {Name: "cfg", MountPath: "/cfg"}, {Name: "tmp", MountPath: "/tmp"}}}},
			Volumes: []v1.Volume{
				{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "db-creds"}}},
				{Name: "cfg", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "web-config"}}}}}}},
				{Name: "tmp", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
			},
		},
	}
	meta := func(name, ns string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: ns, UID: "u-1", ResourceVersion: "42", Generation: 3, Labels: map[string]string{"app": name},
			Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": secretValue},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	dbTemplate := *template.DeepCopy()
	dbTemplate.Labels = map[string]string{"app": "db"}
	return []runtime.Object{
		snapNode("a1", "zone-a", "4", map[string]string{"pool": "web"}),
		snapNode("a2", "zone-a", "4", map[string]string{"pool": "web"}, notReady),
		snapNode("a3", "zone-a", "4", map[string]string{"pool": "web"}),
		snapNode("a4", "zone-a", "16", map[string]string{"pool": "db"}, dedicated),
		snapNode("b1", "zone-b", "4", map[string]string{"pool": "web"}),
		snapNode("b2", "zone-b", "4", map[string]string{"pool": "web"}),
		snapNode("b3", "zone-b", "16", map[string]string{"pool": "db"}, dedicated),
		&appsv1.Deployment{ObjectMeta: meta("web", "shop"), Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](10), Selector: sel, Template: template},
			Status: appsv1.DeploymentStatus{Replicas: 10, ReadyReplicas: 10}},
		&appsv1.StatefulSet{ObjectMeta: meta("db", "shop"), Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3), ServiceName: "db",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, Template: dbTemplate,
			VolumeClaimTemplates: []v1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}, Spec: v1.PersistentVolumeClaimSpec{
				StorageClassName: ptr.To("gp3"), AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
				Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("10Gi")}}}}}}},
		&appsv1.DaemonSet{ObjectMeta: meta("agent", "monitoring"), Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
				Spec: v1.PodSpec{Tolerations: []v1.Toleration{{Operator: v1.TolerationOpExists}}, Containers: []v1.Container{{Name: "agent", Image: "agent:1"}}}}}},
		&appsv1.DaemonSet{ObjectMeta: meta("kube-proxy", "kube-system"), Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "kp"}},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "kp"}}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "kp", Image: "kp:1"}}}}}},
		&policyv1.PodDisruptionBudget{ObjectMeta: meta("web", "shop"), Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(8)), Selector: sel}},
		&policyv1.PodDisruptionBudget{ObjectMeta: meta("db", "shop"), Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromString("34%")),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}},
		&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "high", UID: "x"}, Value: 1000},
		&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "system-node-critical"}, Value: 2000001000},
		&v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-creds", Namespace: "shop"}, StringData: map[string]string{"password": secretValue}, Data: map[string][]byte{"password": []byte(secretValue)}},
		&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web-config", Namespace: "shop"}, Data: map[string]string{"mode": secretValue}},
		&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "nodeshepherd-config-abc123", Namespace: DefaultNodeShepherdNamespace}, Data: map[string]string{
			"config.yaml": "apiVersion: nodeshepherd.io/v1alpha1\nkind: NodeShepherdConfiguration\nleaderElection: {leaderElect: true}\n" +
				"nodeLifecycle:\n  nodeMonitorGracePeriod: 30s\ndrain:\n  drainCondition: [\"KernelDeadlock=True,10m\"]\nscheduler:\n  schedulerName: nodeshepherd-scheduler\n"}},
	}
}

func TestSnapshotGroupsNodes(t *testing.T) {
	s, err := TakeSnapshot(context.Background(), fake.NewClientset(snapshotCluster()...), SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name, zone, cpu string
		nodes           int
		taints          int
	}{{"zone-a-m5-large", "zone-a", "16", 1, 1}, {"zone-a-m5-large-2", "zone-a", "4", 3, 0}, {"zone-b-m5-large", "zone-b", "16", 1, 1}, {"zone-b-m5-large-2", "zone-b", "4", 2, 0}}
	if len(s.Groups) != len(want) {
		t.Fatalf("groups %+v, want %d", s.Groups, len(want))
	}
	for i, w := range want {
		g := s.Groups[i]
		if g.Name != w.name || g.Zone != w.zone || g.Shape.CPU.String() != w.cpu || g.Nodes != w.nodes || len(g.Taints) != w.taints ||
			g.Shape.Memory.String() != "16Gi" || g.Shape.MaxPods != 110 {
			t.Errorf("group %d: %+v, want %+v", i, g, w)
		}
		for _, k := range []string{v1.LabelHostname, v1.LabelTopologyZone, "example.com/machine-id"} {
			if _, ok := g.Labels[k]; ok {
				t.Errorf("group %s keeps the per-node label %s", g.Name, k)
			}
		}
		if g.Labels["node.kubernetes.io/instance-type"] != "m5.large" || g.Labels["pool"] == "" {
			t.Errorf("group %s lost its pool labels: %v", g.Name, g.Labels)
		}
	}
	if s.Groups[0].Taints[0] != (Taint{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoSchedule}) {
		t.Errorf("taint %+v", s.Groups[0].Taints)
	}
	if s.Zones["zone-a"] != 4 || s.Zones["zone-b"] != 3 {
		t.Errorf("zones %v", s.Zones)
	}
}

func TestSnapshotScaling(t *testing.T) {
	objs := snapshotCluster()
	for _, c := range []struct {
		name       string
		opts       SnapshotOptions
		wantNodes  []int
		wantWeb    int32
		wantDB     int32
		wantBudget int32
	}{
		{"as is", SnapshotOptions{}, []int{1, 3, 1, 2}, 10, 3, 8},
		// 3*0.5=1.5 rounds up to 2, 2*0.5=1, 1*0.5=0.5 rounds to 1 (at least 1 anyway).
		{"half", SnapshotOptions{Scale: 0.5}, []int{1, 2, 1, 1}, 5, 2, 4},
		{"tenth", SnapshotOptions{Scale: 0.1}, []int{1, 1, 1, 1}, 1, 1, 1},
		// 7 nodes to at most 5: scale 5/7, rounded down, at least 1: 1, 2, 1, 1.
		{"max nodes", SnapshotOptions{MaxNodes: 5}, []int{1, 2, 1, 1}, 7, 2, 6},
		{"max nodes above the cluster", SnapshotOptions{MaxNodes: 50}, []int{1, 3, 1, 2}, 10, 3, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := TakeSnapshot(context.Background(), fake.NewClientset(objs...), c.opts)
			if err != nil {
				t.Fatal(err)
			}
			for i, g := range s.Groups {
				if g.Nodes != c.wantNodes[i] {
					t.Errorf("group %s: %d nodes, want %d", g.Name, g.Nodes, c.wantNodes[i])
				}
			}
			for _, o := range s.Namespaces["shop"] {
				switch x := o.(type) {
				case *appsv1.Deployment:
					if *x.Spec.Replicas != c.wantWeb {
						t.Errorf("web replicas %d, want %d", *x.Spec.Replicas, c.wantWeb)
					}
				case *appsv1.StatefulSet:
					if *x.Spec.Replicas != c.wantDB {
						t.Errorf("db replicas %d, want %d", *x.Spec.Replicas, c.wantDB)
					}
				case *policyv1.PodDisruptionBudget:
					if x.Name == "web" && x.Spec.MinAvailable.IntVal != c.wantBudget {
						t.Errorf("web PDB minAvailable %v, want %d", x.Spec.MinAvailable, c.wantBudget)
					}
					if x.Name == "db" && x.Spec.MaxUnavailable.StrVal != "34%" {
						t.Errorf("db PDB maxUnavailable %v: percentages stay", x.Spec.MaxUnavailable)
					}
				}
			}
		})
	}
}

// The output holds no Secret or ConfigMap data and no reference to them,
// keeps what scheduling reads, and loads as a scenario.
func TestSnapshotStripsSecretsAndLoads(t *testing.T) {
	s, err := TakeSnapshot(context.Background(), fake.NewClientset(snapshotCluster()...), SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Namespaces["kube-system"]; ok {
		t.Error("kube-system's workloads are in by default")
	}
	if len(s.PriorityClasses) != 1 || s.PriorityClasses[0].Name != "high" {
		t.Errorf("PriorityClasses %v: want high only", s.PriorityClasses)
	}
	dir := filepath.Join(t.TempDir(), "out")
	if _, err := PrepareOutput(dir, false); err != nil {
		t.Fatal(err)
	}
	path, files, err := s.Write(dir, "my-cluster", "context test (https://x)", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 { // priorityclasses, ns-monitoring, ns-shop
		t.Errorf("files %v", files)
	}
	var all strings.Builder
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			data, _ := os.ReadFile(p)
			all.Write(data)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	out := all.String()
	for _, bad := range []string{secretValue, "secretKeyRef", "configMapKeyRef", "secretName", "managedFields", "resourceVersion", "uid:",
		"last-applied", "status:", "creationTimestamp", "leaderElect"} {
		if strings.Contains(out, bad) {
			t.Errorf("output contains %q", bad)
		}
	}
	// The header's notes name what was removed; the YAML itself has none of it.
	var yamlOnly strings.Builder
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			yamlOnly.WriteString(line + "\n")
		}
	}
	for _, bad := range []string{"envFrom", "imagePullSecrets", "web-sa", "gp3", "schedulerName", "serviceAccount", "gvisor", "runtimeClassName"} {
		if strings.Contains(yamlOnly.String(), bad) {
			t.Errorf("manifests or settings contain %q", bad)
		}
	}
	for _, good := range []string{"priorityClassName: high", "nodeSelector:", "topologySpreadConstraints:", "podAntiAffinity:", "tolerations:",
		"cpu: 250m", "team: shop", "fieldRef:", "storageClassName: fake-csi", "name: DB_PASSWORD", "nodeMonitorGracePeriod: 30s",
		"KernelDeadlock=True,10m", "dedicated", "emptyDir: {}", "# Left out or changed:", "from context test (https://x)"} {
		if !strings.Contains(out, good) {
			t.Errorf("output lacks %q", good)
		}
	}
	sc, err := Load(path)
	if err != nil {
		t.Fatalf("the scenario written does not load: %v\n%s", err, out)
	}
	if sc.Name != "my-cluster" || len(sc.Cluster.NodeGroups) != 4 || len(sc.Timeline) != 1 || len(sc.manifests(1)) != 6 {
		t.Errorf("loaded %s: %d groups, %d steps, %d manifests", sc.Name, len(sc.Cluster.NodeGroups), len(sc.Timeline), len(sc.manifests(1)))
	}
	var summary bytes.Buffer
	s.PrintSummary(&summary)
	for _, want := range []string{"Nodes: 7 in 2 zones, 4 node groups", "zone-a", "1 Deployments and 1 StatefulSets (13 replicas in all), 1 DaemonSets, 2 PodDisruptionBudgets, 1 PriorityClasses in 2 namespaces",
		"ConfigMap nodeshepherd-system/nodeshepherd-config-abc123", "volume creds (Secret db-creds) replaced by an emptyDir",
		"2 env values from Secrets or ConfigMaps removed", "scheduler.schedulerName left out",
		`Deployment shop/web: schedulerName "nodeshepherd-scheduler" removed`, `runtimeClassName "gvisor" removed`} {
		if !strings.Contains(summary.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, summary.String())
		}
	}

	// A second snapshot into the same place is refused without --force.
	if _, err := PrepareOutput(dir, false); !errors.Is(err, ErrOutputExists) {
		t.Errorf("existing output: error %v, want ErrOutputExists", err)
	}
	if _, err := PrepareOutput(path, false); !errors.Is(err, ErrOutputExists) {
		t.Errorf("existing scenario file: error %v, want ErrOutputExists", err)
	}
	if _, err := PrepareOutput(dir, true); err != nil {
		t.Errorf("--force: %v", err)
	}
}

func TestSnapshotNamespacesAndConfigFile(t *testing.T) {
	cfg := []byte("apiVersion: nodeshepherd.io/v1alpha1\nkind: NodeShepherdConfiguration\nnodeLifecycle: {nodeEvictionRate: 0.5}\nnodeIPAM: {allocateNodeCidrs: true}\n")
	kubeSystem := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}
	s, err := TakeSnapshot(context.Background(), fake.NewClientset(append(snapshotCluster(), kubeSystem)...),
		SnapshotOptions{Namespaces: []string{"kube-system"}, Config: cfg, ConfigPath: "my.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Namespaces) != 1 || len(s.Namespaces["kube-system"]) != 1 {
		t.Errorf("namespaces %v: want kube-system's DaemonSet only", s.Namespaces)
	}
	// A namespace that does not exist is refused, not read as "no workloads".
	_, err = TakeSnapshot(context.Background(), fake.NewClientset(append(snapshotCluster(), kubeSystem)...), SnapshotOptions{Namespaces: []string{"kube-system", "shpo"}})
	if nsErr := (*NamespaceError)(nil); !errors.As(err, &nsErr) || !slices.Equal(nsErr.Missing, []string{"shpo"}) {
		t.Errorf("unknown namespace: %v, want a NamespaceError naming shpo", err)
	}
	if s.SettingsFrom != "my.yaml" || s.Controllers == nil || len(s.Controllers.Content) != 2 || s.Controllers.Content[0].Value != "nodeLifecycle" {
		t.Errorf("settings from %s: %+v", s.SettingsFrom, s.Controllers)
	}
	if _, err := TakeSnapshot(context.Background(), fake.NewClientset(snapshotCluster()...), SnapshotOptions{Config: []byte("[a"), ConfigPath: "bad.yaml"}); err == nil || !strings.Contains(err.Error(), "bad.yaml") {
		t.Errorf("bad config: %v", err)
	}
	s, err = TakeSnapshot(context.Background(), fake.NewClientset(snapshotNode()), SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Controllers != nil || !strings.Contains(strings.Join(s.Notes, "\n"), "the scenario runs nodeshepherd's defaults") {
		t.Errorf("no ConfigMap: controllers %v, notes %v", s.Controllers, s.Notes)
	}
	// A cluster with nothing but a node, without zone labels, still makes a
	// scenario that loads.
	path := filepath.Join(t.TempDir(), "bare.yaml")
	if _, err := PrepareOutput(path, false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Write(path, "bare", "test", false); err != nil {
		t.Fatal(err)
	}
	if sc, err := Load(path); err != nil || len(sc.Cluster.NodeGroups) != 1 || sc.Cluster.NodeGroups[0].Zone != "no-zone" {
		t.Errorf("bare cluster's scenario: %v", err)
	}
	if _, err := TakeSnapshot(context.Background(), fake.NewClientset(), SnapshotOptions{}); err == nil || !strings.Contains(err.Error(), "no nodes") {
		t.Errorf("no nodes: %v", err)
	}
}

func snapshotNode() *v1.Node {
	return snapNode("n", "", "2", nil)
}
