// Package fakenode simulates many kubelets in one process: it registers Node
// objects, heartbeats through Leases and NodeStatus with kubelet semantics,
// runs the pods bound to its nodes, and injects faults (partitions, kubelet
// stops, node conditions) for a node, a zone or a label selector.
package fakenode

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
)

// ManagedLabel marks the nodes a fakenode process owns; a restarted process
// adopts the nodes with its name prefix.
const ManagedLabel = "nodeshepherd.io/fake-node"

// FieldManager is the field manager of the fake kubelets' pod status
// writes: a real kubelet's, so that managedFields tell a kubelet's own post
// of a pod's Ready condition from a controller's (pkg/chaos relies on it),
// also when the fake nodes share a process with the controllers.
const FieldManager = "kubelet"

// Zone is a topology zone and how many nodes it gets (0: an even share).
type Zone struct {
	Name  string
	Count int
}

// NodeGroup is a set of identical nodes in one zone: a node pool.
type NodeGroup struct {
	Name    string
	Zone    string
	Count   int
	Labels  map[string]string
	Taints  []v1.Taint
	CPU     resource.Quantity
	Memory  resource.Quantity
	MaxPods int
	// Images are the container images the group's nodes report besides
	// Config.Images (an image in both: once).
	Images []v1.ContainerImage
	// Devices are the fake DRA devices the group's nodes publish besides
	// Config.Devices (a driver in both is refused).
	Devices []DeviceSet
}

// Config describes the simulated nodes. Zero durations take kubelet defaults.
type Config struct {
	Client kubernetes.Interface
	// Nodes is the number of nodes; with explicit zone counts it may be 0
	// and is then their sum.
	Nodes      int
	NamePrefix string
	Region     string
	Zones      []Zone
	Labels     map[string]string
	Taints     []v1.Taint
	CPU        resource.Quantity
	Memory     resource.Quantity
	MaxPods    int
	// Groups, when set, are the nodes instead of Nodes and Zones: each group
	// is Count nodes of one zone with a shape, labels and taints of its own
	// (added to Labels and Taints; zero shape fields take CPU, Memory and
	// MaxPods). Nodes are numbered group by group, in order.
	Groups []NodeGroup
	// Images are the container images every node reports in
	// node.status.images, as a kubelet reports what its runtime holds: the
	// largest first, at most NodeStatusMaxImages. They are sent with the
	// full status (registration, a kubelet's restart), never with a
	// heartbeat, and one list is shared by all the nodes of a group.
	Images []v1.ContainerImage
	// NodeStatusMaxImages is the kubelet's --node-status-max-images: how
	// many images a node reports at most (0: the kubelet's 50; -1: all).
	NodeStatusMaxImages int
	// Devices are the fake DRA devices every node publishes, one
	// ResourceSlice per node and driver (devices.go); the fake kubelet
	// starts a pod with resource claims only once they are allocated and
	// reserved for it, and reports its driver's devices of them prepared.
	Devices []DeviceSet

	// LeaseDuration and LeaseRenewInterval match the kubelet's 40s and 10s.
	LeaseDuration      time.Duration
	LeaseRenewInterval time.Duration
	// NodeStatusUpdateFrequency is how often status is computed (kubelet: 10s);
	// it is posted when it changed or NodeStatusReportFrequency (5m) has passed.
	// The pods' statuses that someone else changed are written back at the
	// same period (the kubelet's status manager syncs every 10s, its
	// syncPeriod), at a phase of each node's own: in the real kubelet the
	// two loops drift apart (the node status loop is jittered), so a healed
	// node's pods may be Ready again before or after the node.
	NodeStatusUpdateFrequency time.Duration
	NodeStatusReportFrequency time.Duration
	// PodStartDelay is the time from binding to Running and Ready.
	PodStartDelay time.Duration
	// ReachedAtHeal: a healed partition's kubelet reaches the API server at
	// once, instead of when its request in flight gets through (reconnectAt:
	// the next SYN retransmission of the connection it opened at its last
	// attempt, or its next attempt). The chaos runs keep it: their mutants
	// and seeds were measured with it.
	ReachedAtHeal bool
	// EmulateStalePodStatus reproduces the kubelet 1.15 bug of seed 002: a
	// status that was changed by someone else while the node was away is never
	// re-posted.
	EmulateStalePodStatus bool
	// CSIDriver, when set, runs the fake CSI driver of that name (package
	// fakecsi: CSIDriver, StorageClass, attacher and provisioner for these
	// nodes), writes each node's CSINode, reports its volumes in
	// node.status.volumesInUse, and starts a pod only once its volumes of the
	// driver are attached to the node, as a kubelet does.
	CSIDriver string
	// VolumeAttachDelay is how long the fake driver takes to attach or
	// detach a volume.
	VolumeAttachDelay time.Duration
	// RebootDowntime is how long a machine the fake cloud provider reboots
	// is off; ReplaceDowntime how long a replaced machine's Node is gone
	// before the new machine registers it (package cloudprovider/fake).
	RebootDowntime  time.Duration
	ReplaceDowntime time.Duration
	// RepairDelay is how long the fake cloud takes to start carrying out a
	// repair request once it sees it (0: at once). A real provider takes
	// seconds between accepting a Reboot or Replace and the machine going
	// down; during them the cluster goes on (the scheduler may bind pods to
	// the node), which only a delay lets a rehearsal show.
	RepairDelay time.Duration
	// IgnorePowerOff: the fake cloud accepts power-off requests (a Fence)
	// but the machines keep running, as behind a BMC that fails silently;
	// the provider goes on answering that they run.
	IgnorePowerOff bool
	// CutOffOnceRegistered: each node is cut off from the API server (as by
	// a Partition) right after its Node and its first Lease renewal are
	// written, before its first heartbeat: a kubelet whose network fails
	// just after it registers (the chaos kind silent-newcomer).
	CutOffOnceRegistered bool
	// Workers is the number of goroutines doing API writes.
	Workers int
	// KubeletVersion is reported in node info.
	KubeletVersion string
	Clock          clock.WithTickerAndDelayedExecution
}

// Defaults used by Complete and the CLI flags.
const (
	DefaultNodes                     = 10
	DefaultNamePrefix                = "fake-node-"
	DefaultRegion                    = "region-1"
	DefaultZones                     = "zone-a,zone-b,zone-c"
	DefaultLeaseDuration             = 40 * time.Second
	DefaultLeaseRenewInterval        = 10 * time.Second
	DefaultNodeStatusUpdateFrequency = 10 * time.Second
	DefaultNodeStatusReportFrequency = 5 * time.Minute
	DefaultPodStartDelay             = time.Second
	DefaultRebootDowntime            = fakecloud.DefaultRebootDowntime
	DefaultReplaceDowntime           = fakecloud.DefaultReplaceDowntime
	DefaultWorkers                   = 16
	DefaultMaxPods                   = 110
	DefaultKubeletVersion            = "v1.37.1"
)

// Complete fills zero values with defaults.
func (c *Config) Complete() {
	if c.NamePrefix == "" {
		c.NamePrefix = DefaultNamePrefix
	}
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if len(c.Groups) > 0 {
		// The zones, for targeting faults, are the groups' zones.
		c.Zones, c.Nodes = nil, 0
		for _, g := range c.Groups {
			i := slices.IndexFunc(c.Zones, func(z Zone) bool { return z.Name == g.Zone })
			if i < 0 {
				c.Zones = append(c.Zones, Zone{Name: g.Zone})
				i = len(c.Zones) - 1
			}
			c.Zones[i].Count += g.Count
		}
	}
	if len(c.Zones) == 0 {
		c.Zones, _ = ParseZones(DefaultZones)
	}
	if c.Nodes == 0 {
		for _, z := range c.Zones {
			c.Nodes += z.Count
		}
	}
	if c.CPU.IsZero() {
		c.CPU = resource.MustParse("32")
	}
	if c.Memory.IsZero() {
		c.Memory = resource.MustParse("256Gi")
	}
	setDefault(&c.MaxPods, DefaultMaxPods)
	setDefault(&c.Workers, DefaultWorkers)
	setDefault(&c.NodeStatusMaxImages, DefaultNodeStatusMaxImages)
	setDefault(&c.LeaseDuration, DefaultLeaseDuration)
	setDefault(&c.LeaseRenewInterval, DefaultLeaseRenewInterval)
	setDefault(&c.NodeStatusUpdateFrequency, DefaultNodeStatusUpdateFrequency)
	setDefault(&c.NodeStatusReportFrequency, DefaultNodeStatusReportFrequency)
	setDefault(&c.RebootDowntime, DefaultRebootDowntime)
	setDefault(&c.ReplaceDowntime, DefaultReplaceDowntime)
	if c.KubeletVersion == "" {
		c.KubeletVersion = DefaultKubeletVersion
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
}

func setDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

// Validate reports every invalid field at once.
func (c *Config) Validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("a client is required"))
	}
	return errors.Join(append(errs, c.ValidateSettings())...)
}

// ValidateSettings reports every invalid field but Client at once, so that a
// configuration can be checked before the cluster it is for exists.
func (c *Config) ValidateSettings() error {
	var errs []error
	if c.Nodes < 1 {
		errs = append(errs, fmt.Errorf("nodes must be at least 1, got %d", c.Nodes))
	}
	sum, explicit := 0, 0
	for _, z := range c.Zones {
		sum += z.Count
		if z.Count > 0 {
			explicit++
		}
	}
	if explicit > 0 && explicit != len(c.Zones) {
		errs = append(errs, errors.New("zones: give a count for every zone or for none"))
	} else if explicit > 0 && sum != c.Nodes {
		errs = append(errs, fmt.Errorf("zones: the counts add up to %d but %d nodes were asked for", sum, c.Nodes))
	}
	errs = append(errs, c.validateGroups()...)
	if msgs := validation.IsDNS1123Subdomain(strings.TrimSuffix(c.NamePrefix, "-") + "-0"); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("name prefix %q does not make valid node names: %s", c.NamePrefix, strings.Join(msgs, "; ")))
	}
	for name, d := range map[string]time.Duration{
		"node lease duration": c.LeaseDuration, "node lease renew interval": c.LeaseRenewInterval,
		"node status update frequency": c.NodeStatusUpdateFrequency, "node status report frequency": c.NodeStatusReportFrequency,
		"reboot downtime": c.RebootDowntime, "replace downtime": c.ReplaceDowntime,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %v", name, d))
		}
	}
	if c.RepairDelay < 0 {
		errs = append(errs, fmt.Errorf("repair delay must not be negative, got %v", c.RepairDelay))
	}
	if c.VolumeAttachDelay < 0 {
		errs = append(errs, fmt.Errorf("volume attach delay must not be negative, got %v", c.VolumeAttachDelay))
	}
	if c.CSIDriver != "" {
		if msgs := validation.IsDNS1123Subdomain(c.CSIDriver); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("CSI driver name %q: %s", c.CSIDriver, strings.Join(msgs, "; ")))
		}
	}
	if c.PodStartDelay < 0 {
		errs = append(errs, fmt.Errorf("pod start delay must not be negative, got %v", c.PodStartDelay))
	}
	if c.LeaseRenewInterval >= c.LeaseDuration && c.LeaseDuration > 0 {
		errs = append(errs, fmt.Errorf("node lease renew interval (%v) must be shorter than the lease duration (%v)", c.LeaseRenewInterval, c.LeaseDuration))
	}
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("workers must be at least 1, got %d", c.Workers))
	}
	if c.MaxPods < 1 {
		errs = append(errs, fmt.Errorf("max pods must be at least 1, got %d", c.MaxPods))
	}
	errs = append(errs, validateImages(c.Images, "images")...)
	errs = append(errs, validateDeviceSets(c.Devices, "devices")...)
	if c.NodeStatusMaxImages < -1 {
		errs = append(errs, fmt.Errorf("node status max images must be -1 (report every image) or a positive number, got %d", c.NodeStatusMaxImages))
	}
	return errors.Join(errs...)
}

// validateGroups checks the node groups' counts, zones, labels, taints and
// shapes.
func (c *Config) validateGroups() []error {
	var errs []error
	names := map[string]bool{}
	for i, g := range c.Groups {
		where := fmt.Sprintf("node group %d (%s)", i, g.Name)
		if g.Name == "" || names[g.Name] {
			errs = append(errs, fmt.Errorf("%s: every group needs a name of its own", where))
		}
		names[g.Name] = true
		if g.Count < 1 {
			errs = append(errs, fmt.Errorf("%s: count must be at least 1, got %d", where, g.Count))
		}
		if msgs := validation.IsValidLabelValue(g.Zone); len(msgs) > 0 || g.Zone == "" {
			errs = append(errs, fmt.Errorf("%s: zone %q is not a valid zone label value (%s)", where, g.Zone, strings.Join(msgs, "; ")))
		}
		errs = append(errs, ValidateLabels(g.Labels, where)...)
		for _, t := range g.Taints {
			if err := ValidateTaint(t); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
			}
		}
		if g.CPU.Sign() < 0 || g.Memory.Sign() < 0 || g.MaxPods < 0 {
			errs = append(errs, fmt.Errorf("%s: cpu, memory and maxPods must not be negative", where))
		}
		errs = append(errs, validateDeviceSets(c.nodeDevices(&c.Groups[i]), where+": devices")...)
		if imgErrs := validateImages(g.Images, where+": images"); len(imgErrs) > 0 {
			errs = append(errs, imgErrs...)
		} else if len(validateImages(c.Images, "")) == 0 {
			if _, err := mergeImages(c.Images, g.Images); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
			}
		}
	}
	return errs
}

// ValidateLabels checks label keys and values as the API server would.
func ValidateLabels(labels map[string]string, where string) []error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s: label key %q: %s", where, k, strings.Join(msgs, "; ")))
		}
		if msgs := validation.IsValidLabelValue(labels[k]); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s: label %s value %q: %s", where, k, labels[k], strings.Join(msgs, "; ")))
		}
	}
	return errs
}

// ValidateTaint checks a taint's key, value and effect as the API server would.
func ValidateTaint(t v1.Taint) error {
	if msgs := validation.IsQualifiedName(t.Key); len(msgs) > 0 {
		return fmt.Errorf("taint key %q: %s", t.Key, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsValidLabelValue(t.Value); len(msgs) > 0 {
		return fmt.Errorf("taint %s value %q: %s", t.Key, t.Value, strings.Join(msgs, "; "))
	}
	switch t.Effect {
	case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		return nil
	}
	return fmt.Errorf("taint %s: effect %q must be NoSchedule, PreferNoSchedule or NoExecute", t.Key, t.Effect)
}

// groupOf returns the group of the i-th node (nil without groups): groups
// are consecutive blocks of node indexes, in order.
func (c *Config) groupOf(i int) *NodeGroup {
	for g := range c.Groups {
		if i < c.Groups[g].Count {
			return &c.Groups[g]
		}
		i -= c.Groups[g].Count
	}
	return nil
}

// ParseZones parses "zone-a,zone-b" (nodes spread evenly) or
// "zone-a=20,zone-b=10" (explicit counts).
func ParseZones(s string) ([]Zone, error) {
	var zones []Zone
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, fmt.Errorf("zones %q: empty zone name; use a comma-separated list like zone-a,zone-b or zone-a=20,zone-b=10", s)
		}
		name, count, hasCount := strings.Cut(part, "=")
		z := Zone{Name: name}
		if hasCount {
			n, err := strconv.Atoi(count)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("zones %q: count %q of zone %q must be a whole number of at least 1", s, count, name)
			}
			z.Count = n
		}
		if msgs := validation.IsValidLabelValue(name); len(msgs) > 0 || name == "" {
			return nil, fmt.Errorf("zones %q: %q is not a valid zone label value (%s)", s, name, strings.Join(msgs, "; "))
		}
		if seen[name] {
			return nil, fmt.Errorf("zones %q: zone %q is listed twice", s, name)
		}
		seen[name] = true
		zones = append(zones, z)
	}
	return zones, nil
}

// zoneOf returns the zone of the i-th node: consecutive blocks with explicit
// counts, round-robin otherwise.
func (c *Config) zoneOf(i int) string {
	if c.Zones[0].Count == 0 {
		return c.Zones[i%len(c.Zones)].Name
	}
	for _, z := range c.Zones {
		if i < z.Count {
			return z.Name
		}
		i -= z.Count
	}
	return c.Zones[len(c.Zones)-1].Name
}

// nodeName returns the i-th node's name, zero-padded so that names sort.
func (c *Config) nodeName(i int) string {
	width := max(4, len(strconv.Itoa(c.Nodes-1)))
	return fmt.Sprintf("%s%0*d", c.NamePrefix, width, i)
}
