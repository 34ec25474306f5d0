package simulate

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/config"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakecsi"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
)

// Where deploy/ puts nodeshepherd and its configuration: a snapshot reads
// the settings from there when no configuration file is given.
const (
	DefaultNodeShepherdNamespace = "nodeshepherd-system"
	configMapPrefix              = "nodeshepherd-config"
	configMapKey                 = "config.yaml"
)

// SnapshotOptions say what a snapshot reads and how it scales the cluster.
type SnapshotOptions struct {
	// Scale multiplies node counts and replicas (0 or 1: as they are).
	Scale float64
	// MaxNodes, when set, caps the nodes: the scale becomes MaxNodes/total
	// when that is smaller.
	MaxNodes int
	// Namespaces limits the workloads to these namespaces (empty: all).
	Namespaces []string
	// IncludeSystem keeps kube-system and NodeShepherdNamespace, skipped
	// by default: their workloads are the cluster's and nodeshepherd's own.
	IncludeSystem         bool
	NodeShepherdNamespace string
	// Config is nodeshepherd's configuration file (ConfigPath names it);
	// nil reads the nodeshepherd-config ConfigMap of NodeShepherdNamespace.
	Config     []byte
	ConfigPath string
}

// Snapshot is what a live cluster's scenario is made of.
type Snapshot struct {
	Groups []NodeGroup
	// Images is the image table (cluster.images): the images a group's
	// nodes report, largest first; NodeImages those every group has
	// (cluster.node.images), left out of the groups' Images.
	Images     []Image
	NodeImages []string
	// ImagesSeen is how many distinct images the nodes report in all.
	ImagesSeen int
	// Zones are the zones' real node counts, before scaling.
	Zones map[string]int
	// Scale is the scale applied; NodeRounding says how counts were rounded.
	Scale        float64
	NodeRounding string
	// PriorityClasses come first: the workloads' pods name them.
	PriorityClasses []*schedulingv1.PriorityClass
	// Namespaces holds each namespace's PDBs, Deployments, StatefulSets and
	// DaemonSets, in that order.
	Namespaces map[string][]any
	// Controllers is the controllers: block, nil without settings.
	Controllers *yaml.Node
	// SettingsFrom says where the settings came from.
	SettingsFrom string
	// Notes are what was changed or left out, one line each: Secret and
	// ConfigMap references, unknown storage classes, dropped settings.
	Notes []string
	Taken time.Time
}

// nodeLabelsDropped are labels every node has a value of its own for, or
// that the fake nodes set themselves.
var nodeLabelsDropped = []string{v1.LabelHostname, v1.LabelTopologyZone, fakenode.ManagedLabel}

// nodeTaintPrefixes are taints controllers and autoscalers put on and take
// off (not-ready, unreachable, unschedulable, pressure, shutdown, ...): the
// state of the moment, not the node pool's.
var nodeTaintPrefixes = []string{"node.kubernetes.io/", "node.cloudprovider.kubernetes.io/", "ToBeDeletedByClusterAutoscaler",
	"DeletionCandidateOfClusterAutoscaler"}

// poolLabels name a node's pool on the common platforms, best first; a
// group is named after its zone and pool.
var poolLabels = []string{"karpenter.sh/nodepool", "cloud.google.com/gke-nodepool", "eks.amazonaws.com/nodegroup",
	"kubernetes.azure.com/agentpool", "node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type"}

// TakeSnapshot reads the cluster's nodes, workloads, PriorityClasses and
// nodeshepherd's settings.
func TakeSnapshot(ctx context.Context, c kubernetes.Interface, o SnapshotOptions) (*Snapshot, error) {
	if o.NodeShepherdNamespace == "" {
		o.NodeShepherdNamespace = DefaultNodeShepherdNamespace
	}
	s := &Snapshot{Namespaces: map[string][]any{}, Zones: map[string]int{}, Taken: time.Now().UTC()}
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	if len(nodes.Items) == 0 {
		return nil, fmt.Errorf("the cluster has no nodes: there is nothing to rehearse on")
	}
	devices, err := s.readDevices(ctx, c)
	if err != nil {
		return nil, err
	}
	s.groupNodes(nodes.Items, devices)
	s.scaleNodes(o.Scale, o.MaxNodes)
	if err := s.checkNamespaces(ctx, c, o.Namespaces); err != nil {
		return nil, err
	}
	if err := s.readWorkloads(ctx, c, o); err != nil {
		return nil, err
	}
	if err := s.readSettings(ctx, c, o); err != nil {
		return nil, err
	}
	return s, nil
}

// groupKey is what makes nodes identical for a scenario.
type groupKey struct {
	zone, cpu, memory string
	pods              int64
	labels, taints    string
	devices           string
}

// groupNodes puts nodes of one zone with the same allocatable resources,
// labels (but per-node ones), lasting taints and DRA devices in one group.
func (s *Snapshot) groupNodes(nodes []v1.Node, devices map[string][]fakenode.DeviceSet) {
	type group struct {
		g    NodeGroup
		pool string
		// images counts the group's nodes reporting each image of cat.
		images map[int]int
	}
	var cat imageCatalogue
	groups := map[groupKey]*group{}
	var keys []groupKey
	for i := range nodes {
		n := &nodes[i]
		zone := n.Labels[v1.LabelTopologyZone]
		if zone == "" {
			zone = n.Labels[v1.LabelFailureDomainBetaZone]
		}
		if zone == "" {
			zone = "no-zone"
		}
		s.Zones[zone]++
		labels := map[string]string{}
		for k, v := range n.Labels {
			if !slices.Contains(nodeLabelsDropped, k) && v != n.Name {
				labels[k] = v
			}
		}
		var taints []Taint
		for _, t := range n.Spec.Taints {
			if !slices.ContainsFunc(nodeTaintPrefixes, func(p string) bool { return strings.HasPrefix(t.Key, p) }) {
				taints = append(taints, Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
			}
		}
		alloc := n.Status.Allocatable
		if len(alloc) == 0 {
			alloc = n.Status.Capacity
		}
		cpu, mem := alloc[v1.ResourceCPU], alloc[v1.ResourceMemory]
		k := groupKey{zone: zone, cpu: cpu.String(), memory: mem.String(), pods: alloc.Pods().Value(),
			labels: fmt.Sprint(sortedMap(labels)), taints: fmt.Sprint(taints), devices: fmt.Sprint(devices[n.Name])}
		if g := groups[k]; g != nil {
			g.g.Nodes++
			cat.count(n.Status.Images, g.images)
			continue
		}
		g := &group{g: NodeGroup{Zone: zone, Nodes: 1, Labels: labels, Taints: taints, devices: devices[n.Name],
			Shape: GroupShape{CPU: Quantity{cpu}, Memory: Quantity{mem}, MaxPods: int(k.pods)}}, images: map[int]int{}}
		cat.count(n.Status.Images, g.images)
		for _, l := range poolLabels {
			if v := labels[l]; v != "" {
				g.pool = v
				break
			}
		}
		if g.pool == "" {
			g.pool = "nodes"
		}
		groups[k] = g
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := groups[keys[i]], groups[keys[j]]
		if a.g.Zone != b.g.Zone {
			return a.g.Zone < b.g.Zone
		}
		if a.pool != b.pool {
			return a.pool < b.pool
		}
		return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j])
	})
	used := map[string]int{}
	var counts []map[int]int
	for _, k := range keys {
		g := groups[k]
		name := dnsLabel(g.g.Zone + "-" + g.pool)
		if used[name]++; used[name] > 1 {
			name = dnsLabel(fmt.Sprintf("%s-%d", strings.TrimRight(name[:min(len(name), 58)], "-"), used[name]))
		}
		g.g.Name = name
		s.Groups = append(s.Groups, g.g)
		counts = append(counts, g.images)
	}
	s.tableImages(&cat, counts)
}

// imageCatalogue is every image the nodes report, each once: an image is
// known by any of its names (a kubelet reports repo digests and tags).
type imageCatalogue struct {
	images []catalogued
	byName map[string]int
}

type catalogued struct {
	names []string
	size  int64
}

// count adds a node's images to the catalogue and counts them in perGroup
// (index in the catalogue -> nodes). Names that are no image reference are
// left out, and images without any.
func (c *imageCatalogue) count(images []v1.ContainerImage, perGroup map[int]int) {
	if c.byName == nil {
		c.byName = map[string]int{}
	}
	seen := map[int]bool{}
	for _, im := range images {
		var names []string
		for _, n := range im.Names {
			if fakenode.ValidateImageName(n) == nil && !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		if len(names) == 0 {
			continue
		}
		i := -1
		for _, n := range names {
			if j, ok := c.byName[n]; ok {
				i = j
				break
			}
		}
		if i < 0 {
			i = len(c.images)
			c.images = append(c.images, catalogued{size: max(im.SizeBytes, 0)})
		}
		for _, n := range names {
			if _, taken := c.byName[n]; !taken && len(c.images[i].names) < fakenode.MaxNamesPerImage {
				c.byName[n] = i
				c.images[i].names = append(c.images[i].names, n)
			}
		}
		if !seen[i] {
			seen[i] = true
			perGroup[i]++
		}
	}
}

// refName is the name a group names an image by: its first tag, else its
// first name (a digest).
func (c catalogued) refName() string {
	for _, n := range c.names {
		if !strings.Contains(n, "@") {
			return n
		}
	}
	return c.names[0]
}

// tableImages gives each group the images at least half of its nodes
// report (counts[g]: image -> nodes, before scaling), moves those every
// group has to NodeImages, and writes the table of them, largest first.
func (s *Snapshot) tableImages(cat *imageCatalogue, counts []map[int]int) {
	s.ImagesSeen = len(cat.images)
	order := make([]int, len(cat.images))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		if c := cmp.Compare(cat.images[b].size, cat.images[a].size); c != 0 {
			return c
		}
		return cmp.Compare(cat.images[a].refName(), cat.images[b].refName())
	})
	held := make([]map[int]bool, len(s.Groups))
	inTable := map[int]bool{}
	for g := range s.Groups {
		held[g] = map[int]bool{}
		for i, n := range counts[g] {
			if 2*n >= s.Groups[g].Nodes {
				held[g][i], inTable[i] = true, true
			}
		}
	}
	for _, i := range order {
		if !inTable[i] {
			continue
		}
		im := cat.images[i]
		entry := Image{Size: ImageSize{Bytes: im.size, set: true}}
		if len(im.names) == 1 {
			entry.Name = im.names[0]
		} else {
			entry.Names = im.names
		}
		s.Images = append(s.Images, entry)
		everywhere := true
		for g := range s.Groups {
			everywhere = everywhere && held[g][i]
		}
		if everywhere {
			s.NodeImages = append(s.NodeImages, im.refName())
			continue
		}
		for g := range s.Groups {
			if held[g][i] {
				s.Groups[g].Images = append(s.Groups[g].Images, im.refName())
			}
		}
	}
}

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// dnsLabel makes s a DNS label: lowercase, '-' for anything else, at most 63.
func dnsLabel(s string) string {
	s = notDNS.ReplaceAllString(strings.ToLower(s), "-")
	if len(s) > 63 {
		s = s[:63]
	}
	s = strings.Trim(s, "-")
	if s == "" {
		return "nodes"
	}
	return s
}

func sortedMap(m map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return out
}

// scaledCount is n times scale rounded to the nearest whole number (halves
// up), at least 1.
func scaledCount(n int, scale float64) int {
	if scale <= 0 || scale == 1 || n <= 0 {
		return n
	}
	return max(1, int(math.Floor(float64(n)*scale+0.5)))
}

// scaleNodes applies the scale, or the one --max-nodes asks for, to the
// groups' node counts.
func (s *Snapshot) scaleNodes(scale float64, maxNodes int) {
	total := 0
	for _, g := range s.Groups {
		total += g.Nodes
	}
	if scale <= 0 {
		scale = 1
	}
	s.NodeRounding = "node counts and replicas multiplied by the scale and rounded to the nearest whole number (halves up), at least 1 per group and workload"
	if maxNodes > 0 && float64(total)*scale > float64(maxNodes) {
		scale = float64(maxNodes) / float64(total)
		s.NodeRounding = fmt.Sprintf("--max-nodes %d: node counts multiplied by %.4g and rounded down, at least 1 per group; replicas multiplied by it and rounded to the nearest (halves up), at least 1", maxNodes, scale)
		for i := range s.Groups {
			s.Groups[i].Nodes = max(1, int(math.Floor(float64(s.Groups[i].Nodes)*scale)))
		}
		s.Scale = scale
		return
	}
	s.Scale = scale
	for i := range s.Groups {
		s.Groups[i].Nodes = scaledCount(s.Groups[i].Nodes, scale)
	}
}

// skipNamespace says whether a namespace's workloads stay out.
func skipNamespace(ns string, o SnapshotOptions) bool {
	if len(o.Namespaces) > 0 {
		return !slices.Contains(o.Namespaces, ns)
	}
	return !o.IncludeSystem && (ns == metav1.NamespaceSystem || ns == o.NodeShepherdNamespace)
}

// readWorkloads reads PriorityClasses, PDBs, Deployments, StatefulSets and
// DaemonSets, cleaned for a scenario.
func (s *Snapshot) readWorkloads(ctx context.Context, c kubernetes.Interface, o SnapshotOptions) error {
	pcs, err := c.SchedulingV1().PriorityClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing PriorityClasses: %w", err)
	}
	for i := range pcs.Items {
		pc := &pcs.Items[i]
		if strings.HasPrefix(pc.Name, "system-") {
			continue
		}
		s.PriorityClasses = append(s.PriorityClasses, &schedulingv1.PriorityClass{
			TypeMeta:   metav1.TypeMeta{APIVersion: "scheduling.k8s.io/v1", Kind: "PriorityClass"},
			ObjectMeta: cleanMeta(pc.ObjectMeta), Value: pc.Value, GlobalDefault: pc.GlobalDefault,
			Description: pc.Description, PreemptionPolicy: pc.PreemptionPolicy})
	}
	pdbs, err := c.PolicyV1().PodDisruptionBudgets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing PodDisruptionBudgets: %w", err)
	}
	for i := range pdbs.Items {
		p := &pdbs.Items[i]
		if skipNamespace(p.Namespace, o) {
			continue
		}
		spec := *p.Spec.DeepCopy()
		spec.MinAvailable = s.scaleBudget(spec.MinAvailable)
		spec.MaxUnavailable = s.scaleBudget(spec.MaxUnavailable)
		s.add(p.Namespace, &policyv1.PodDisruptionBudget{TypeMeta: metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
			ObjectMeta: cleanMeta(p.ObjectMeta), Spec: spec})
	}
	if err := s.readClaimTemplates(ctx, c, o); err != nil {
		return err
	}
	deps, err := c.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Deployments: %w", err)
	}
	for i := range deps.Items {
		d := &deps.Items[i]
		if skipNamespace(d.Namespace, o) {
			continue
		}
		spec := *d.Spec.DeepCopy()
		spec.Replicas = s.scaleReplicas(spec.Replicas)
		spec.Paused = false
		where := "Deployment " + d.Namespace + "/" + d.Name
		s.cleanTemplate(where, &spec.Template)
		s.add(d.Namespace, &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
			ObjectMeta: cleanMeta(d.ObjectMeta), Spec: spec})
	}
	sts, err := c.AppsV1().StatefulSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing StatefulSets: %w", err)
	}
	for i := range sts.Items {
		st := &sts.Items[i]
		if skipNamespace(st.Namespace, o) {
			continue
		}
		spec := *st.Spec.DeepCopy()
		spec.Replicas = s.scaleReplicas(spec.Replicas)
		where := "StatefulSet " + st.Namespace + "/" + st.Name
		s.cleanTemplate(where, &spec.Template)
		for j := range spec.VolumeClaimTemplates {
			pvc := &spec.VolumeClaimTemplates[j]
			pvc.ObjectMeta = metav1.ObjectMeta{Name: pvc.Name, Labels: pvc.Labels}
			pvc.Status = v1.PersistentVolumeClaimStatus{}
			pvc.Spec.VolumeName, pvc.Spec.DataSource, pvc.Spec.DataSourceRef = "", nil, nil
			if old := ptr.Deref(pvc.Spec.StorageClassName, ""); old != fakecsi.DefaultStorageClassName {
				s.note("%s: volume claim template %s: storage class %q replaced by %s, the fake CSI driver's", where, pvc.Name, old, fakecsi.DefaultStorageClassName)
				pvc.Spec.StorageClassName = ptr.To(fakecsi.DefaultStorageClassName)
			}
		}
		s.add(st.Namespace, &appsv1.StatefulSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
			ObjectMeta: cleanMeta(st.ObjectMeta), Spec: spec})
	}
	dss, err := c.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing DaemonSets: %w", err)
	}
	for i := range dss.Items {
		ds := &dss.Items[i]
		if skipNamespace(ds.Namespace, o) {
			continue
		}
		spec := *ds.Spec.DeepCopy()
		s.cleanTemplate("DaemonSet "+ds.Namespace+"/"+ds.Name, &spec.Template)
		s.add(ds.Namespace, &appsv1.DaemonSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
			ObjectMeta: cleanMeta(ds.ObjectMeta), Spec: spec})
	}
	return nil
}

func (s *Snapshot) add(ns string, obj any) { s.Namespaces[ns] = append(s.Namespaces[ns], obj) }

func (s *Snapshot) note(format string, args ...any) {
	s.Notes = append(s.Notes, fmt.Sprintf(format, args...))
}

func (s *Snapshot) scaleReplicas(r *int32) *int32 {
	if r == nil {
		return nil
	}
	return ptr.To(int32(scaledCount(int(*r), s.Scale)))
}

// scaleBudget scales a PDB's whole number as replicas are (percentages
// stay): a budget of 10 pods would block every eviction of a Deployment
// scaled to 3.
func (s *Snapshot) scaleBudget(v *intstr.IntOrString) *intstr.IntOrString {
	if v == nil || v.Type != intstr.Int || v.IntVal <= 0 {
		return v
	}
	return ptr.To(intstr.FromInt32(int32(scaledCount(int(v.IntVal), s.Scale))))
}

// cleanMeta keeps what a manifest is written with: name, namespace, labels.
// Annotations go: last-applied-configuration holds the whole object as it
// was applied, env values included.
func cleanMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels}
}

// cleanTemplate strips a pod template of everything that could carry a
// Secret's or a ConfigMap's data or needs objects a scenario does not have,
// noting each change. Scheduling fields (requests, affinities, tolerations,
// nodeSelector, priorityClassName, topologySpreadConstraints) stay.
func (s *Snapshot) cleanTemplate(where string, t *v1.PodTemplateSpec) {
	t.ObjectMeta = metav1.ObjectMeta{Labels: t.Labels, Annotations: t.Annotations}
	delete(t.Annotations, "kubectl.kubernetes.io/last-applied-configuration")
	if len(t.Annotations) == 0 {
		t.Annotations = nil
	}
	spec := &t.Spec
	for _, rc := range spec.ResourceClaims {
		if rc.ResourceClaimName != nil {
			// A shared claim is an object of its own, not a workload.
			s.note("%s: pod claim %s names ResourceClaim %s, which the snapshot does not copy: its pods will stay pending unless you add the claim", where, rc.Name, *rc.ResourceClaimName)
		}
	}
	if len(spec.ImagePullSecrets) > 0 {
		s.note("%s: imagePullSecrets removed (Secrets)", where)
		spec.ImagePullSecrets = nil
	}
	if spec.ServiceAccountName != "" && spec.ServiceAccountName != "default" || spec.DeprecatedServiceAccount != "" && spec.DeprecatedServiceAccount != "default" {
		s.note("%s: serviceAccountName %q removed (the scenario has no ServiceAccounts; pods run as default)", where, spec.ServiceAccountName)
	}
	spec.ServiceAccountName, spec.DeprecatedServiceAccount = "", ""
	// The simulation's one scheduler is default-scheduler (nodeshepherd's or
	// kube-scheduler): pods waiting for another would stay Pending.
	if spec.SchedulerName != "" && spec.SchedulerName != v1.DefaultSchedulerName {
		s.note("%s: schedulerName %q removed (the simulation schedules with %s)", where, spec.SchedulerName, v1.DefaultSchedulerName)
		spec.SchedulerName = ""
	}
	if spec.RuntimeClassName != nil {
		s.note("%s: runtimeClassName %q removed (the scenario has no RuntimeClasses)", where, *spec.RuntimeClassName)
		spec.RuntimeClassName = nil
	}
	for i := range spec.Volumes {
		vol := &spec.Volumes[i]
		var why string
		switch {
		case vol.Secret != nil:
			why = "Secret " + vol.Secret.SecretName
		case vol.ConfigMap != nil:
			why = "ConfigMap " + vol.ConfigMap.Name
		case vol.Projected != nil:
			why = "projected"
		case vol.PersistentVolumeClaim != nil:
			why = "PersistentVolumeClaim " + vol.PersistentVolumeClaim.ClaimName
		case vol.CSI != nil:
			why = "CSI " + vol.CSI.Driver
		case vol.Ephemeral != nil:
			why = "ephemeral claim"
		case vol.EmptyDir != nil, vol.HostPath != nil, vol.DownwardAPI != nil:
			continue
		default:
			why = "volume source"
		}
		s.note("%s: volume %s (%s) replaced by an emptyDir", where, vol.Name, why)
		vol.VolumeSource = v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}
	}
	for _, cs := range [][]v1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			s.cleanContainer(where, &cs[i])
		}
	}
	spec.EphemeralContainers = nil // debugging containers, added to pods, never templates
}

// cleanContainer drops env references to Secrets and ConfigMaps, envFrom,
// literal env values, command lines, probes and hooks: the fake kubelet
// runs no containers, and literal values are where credentials get written
// by hand.
func (s *Snapshot) cleanContainer(where string, c *v1.Container) {
	// Command lines, probes and hooks matter to no fake kubelet and can
	// carry a password as well as an env value can.
	c.Command, c.Args, c.Lifecycle = nil, nil, nil
	c.LivenessProbe, c.ReadinessProbe, c.StartupProbe = nil, nil, nil
	if len(c.EnvFrom) > 0 {
		s.note("%s: container %s: envFrom removed (%d Secret or ConfigMap sources)", where, c.Name, len(c.EnvFrom))
		c.EnvFrom = nil
	}
	refs, literals := 0, 0
	for i := range c.Env {
		e := &c.Env[i]
		if e.ValueFrom != nil && (e.ValueFrom.SecretKeyRef != nil || e.ValueFrom.ConfigMapKeyRef != nil) {
			refs++
			e.ValueFrom = nil
		}
		if e.Value != "" {
			literals++
			e.Value = ""
		}
	}
	if refs > 0 {
		s.note("%s: container %s: %d env values from Secrets or ConfigMaps removed (names kept)", where, c.Name, refs)
	}
	if literals > 0 {
		s.note("%s: container %s: %d literal env values blanked (names kept)", where, c.Name, literals)
	}
}

// NamespaceError names namespaces asked for that the cluster does not have:
// a typo must not give a scenario without workloads.
type NamespaceError struct{ Missing []string }

func (e *NamespaceError) Error() string {
	return fmt.Sprintf("namespace(s) %s not found in the cluster", strings.Join(e.Missing, ", "))
}

// checkNamespaces refuses namespaces that do not exist; without the right
// to read one it says so in the notes and goes on.
func (s *Snapshot) checkNamespaces(ctx context.Context, c kubernetes.Interface, names []string) error {
	var missing []string
	for _, ns := range names {
		_, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, ns)
		case apierrors.IsForbidden(err):
			s.note("namespace %s: not checked (these credentials may not get namespaces)", ns)
		case err != nil:
			return fmt.Errorf("reading namespace %s: %w", ns, err)
		}
	}
	if len(missing) > 0 {
		return &NamespaceError{Missing: missing}
	}
	return nil
}

// SettingsError is nodeshepherd's configuration that cannot be read: the
// --config file's fault, or the ConfigMap's.
type SettingsError struct{ Err error }

func (e *SettingsError) Error() string { return e.Err.Error() }
func (e *SettingsError) Unwrap() error { return e.Err }

// readSettings reads nodeshepherd's configuration (the file given, or the
// ConfigMap deploy/ installs) and keeps its controller sections, but the
// settings the simulation decides.
func (s *Snapshot) readSettings(ctx context.Context, c kubernetes.Interface, o SnapshotOptions) error {
	data, from := o.Config, o.ConfigPath
	if data == nil {
		cms, err := c.CoreV1().ConfigMaps(o.NodeShepherdNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			s.note("nodeshepherd settings: cannot list ConfigMaps in %s (%v): the scenario runs nodeshepherd's defaults; pass --config", o.NodeShepherdNamespace, err)
			return nil
		}
		// kustomize's configMapGenerator appends a hash: the newest wins.
		var newest *v1.ConfigMap
		for i := range cms.Items {
			cm := &cms.Items[i]
			if _, ok := cm.Data[configMapKey]; ok && strings.HasPrefix(cm.Name, configMapPrefix) &&
				(newest == nil || cm.CreationTimestamp.After(newest.CreationTimestamp.Time)) {
				newest = cm
			}
		}
		if newest == nil {
			s.note("nodeshepherd settings: no ConfigMap %s* with %s in namespace %s: the scenario runs nodeshepherd's defaults; pass --config", configMapPrefix, configMapKey, o.NodeShepherdNamespace)
			return nil
		}
		data, from = []byte(newest.Data[configMapKey]), "ConfigMap "+o.NodeShepherdNamespace+"/"+newest.Name
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return &SettingsError{fmt.Errorf("%s: %w", from, err)}
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return &SettingsError{fmt.Errorf("%s: expected a %s document", from, config.Kind)}
	}
	root := doc.Content[0]
	def := controllers.Default()
	var sections []string
	for _, sec := range def.Sections() {
		sections = append(sections, sec.Name)
	}
	var dropKeys []string
	for _, f := range notInSimulations {
		dropKeys = append(dropKeys, config.Key(f))
	}
	out := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if !slices.Contains(sections, k.Value) {
			continue
		}
		if v.Kind != yaml.MappingNode {
			return &SettingsError{fmt.Errorf("%s:%d: %s: expected a mapping of settings", from, v.Line, k.Value)}
		}
		sec := &yaml.Node{Kind: yaml.MappingNode}
		for j := 0; j+1 < len(v.Content); j += 2 {
			if slices.Contains(dropKeys, v.Content[j].Value) {
				s.note("nodeshepherd settings: %s.%s left out: the simulation sets it", k.Value, v.Content[j].Value)
				continue
			}
			sec.Content = append(sec.Content, v.Content[j], v.Content[j+1])
		}
		if len(sec.Content) > 0 {
			out.Content = append(out.Content, k, sec)
		}
	}
	s.SettingsFrom = from
	if len(out.Content) > 0 {
		s.Controllers = out
	}
	return nil
}
