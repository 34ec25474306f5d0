package fakenode

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
)

// DeviceSet is the fake devices one DRA driver offers on every node it is
// given to: Count devices named PREFIX-0 .. PREFIX-(Count-1), PREFIX being
// the driver name's first label (gpu for gpu.fake.nodeshepherd.io), each
// with the string attribute model and, when Memory is set, the capacity
// memory. A node publishes them as one ResourceSlice whose pool is the
// node's name, as a node-local DRA driver's kubelet plugin does.
type DeviceSet struct {
	Driver string
	Count  int
	// Model is the devices' model attribute (DefaultDeviceModel when empty).
	Model  string
	Memory resource.Quantity
	// Class is the DeviceClass selecting every device of the driver
	// (device.driver == DRIVER) that the fake nodes create when it is
	// missing; empty: named after the driver.
	Class string
}

// DefaultDeviceModel is a device set's model when none is given.
const DefaultDeviceModel = "fake"

// Attribute and capacity names of the fake devices (qualified by the
// driver's name in CEL: device.attributes["DRIVER"].model).
const (
	DeviceAttributeModel  = "model"
	DeviceAttributeIndex  = "index"
	DeviceCapacityMemory  = "memory"
	deviceConditionReady  = "Ready"
	devicePreparedReason  = "DevicePrepared"
	devicePreparedMessage = "prepared by nodeshepherd fakenodes' fake DRA driver"
)

var deviceModel = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,62}[A-Za-z0-9])?$`)

// ParseDeviceSet parses DRIVER=COUNT[,model=MODEL][,memory=QUANTITY][,class=NAME],
// e.g. gpu.fake.nodeshepherd.io=4,model=a100,memory=80Gi.
func ParseDeviceSet(s string) (DeviceSet, error) {
	parts := strings.Split(s, ",")
	driver, count, ok := strings.Cut(parts[0], "=")
	if !ok {
		return DeviceSet{}, fmt.Errorf("devices %q: expected DRIVER=COUNT[,model=MODEL][,memory=QUANTITY][,class=NAME], e.g. gpu.fake.nodeshepherd.io=4,model=a100,memory=80Gi", s)
	}
	d := DeviceSet{Driver: driver}
	n, err := strconv.Atoi(count)
	if err != nil {
		return DeviceSet{}, fmt.Errorf("devices %q: count %q must be a whole number from 1 to %d", s, count, resourceapi.ResourceSliceMaxDevices)
	}
	d.Count = n
	seen := map[string]bool{}
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok || seen[k] {
			return DeviceSet{}, fmt.Errorf("devices %q: %q: after the count give model=, memory= or class=, each once", s, p)
		}
		seen[k] = true
		switch k {
		case "model":
			d.Model = v
		case "class":
			d.Class = v
		case "memory":
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return DeviceSet{}, fmt.Errorf("devices %q: memory %q is not a quantity such as 80Gi", s, v)
			}
			d.Memory = q
		default:
			return DeviceSet{}, fmt.Errorf("devices %q: unknown key %q; the keys are model, memory and class", s, k)
		}
	}
	if err := d.Validate(); err != nil {
		return DeviceSet{}, fmt.Errorf("devices %q: %w", s, err)
	}
	return d, nil
}

// String prints the set as ParseDeviceSet reads it.
func (d DeviceSet) String() string {
	s := d.Driver + "=" + strconv.Itoa(d.Count)
	if d.Model != "" {
		s += ",model=" + d.Model
	}
	if !d.Memory.IsZero() {
		s += ",memory=" + d.Memory.String()
	}
	if d.Class != "" {
		s += ",class=" + d.Class
	}
	return s
}

// Validate checks what the API server would refuse in the ResourceSlice and
// the DeviceClass.
func (d DeviceSet) Validate() error {
	var errs []error
	if msgs := validation.IsDNS1123Subdomain(d.Driver); len(msgs) > 0 || len(d.Driver) > resourceapi.DriverNameMaxLength {
		errs = append(errs, fmt.Errorf("driver %q must be a lowercase DNS subdomain of at most %d characters, e.g. gpu.fake.nodeshepherd.io", d.Driver, resourceapi.DriverNameMaxLength))
	}
	if d.Count < 1 || d.Count > resourceapi.ResourceSliceMaxDevices {
		errs = append(errs, fmt.Errorf("count %d must be from 1 to %d (the devices of one ResourceSlice)", d.Count, resourceapi.ResourceSliceMaxDevices))
	}
	if d.Model != "" && !deviceModel.MatchString(d.Model) {
		errs = append(errs, fmt.Errorf("model %q must be at most 64 letters, digits, '.', '_' or '-', starting and ending with a letter or digit", d.Model))
	}
	if d.Memory.Sign() < 0 {
		errs = append(errs, fmt.Errorf("memory %s must not be negative", d.Memory.String()))
	}
	if d.Class != "" {
		if msgs := validation.IsDNS1123Subdomain(d.Class); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("class %q must be a lowercase DNS subdomain (a DeviceClass name)", d.Class))
		}
	}
	return errors.Join(errs...)
}

// ClassName is the DeviceClass of the set's driver.
func (d DeviceSet) ClassName() string {
	if d.Class != "" {
		return d.Class
	}
	return d.Driver
}

// DevicePrefix is the first part of the set's device names: the driver
// name's first label, short enough for "-127" to keep a DNS label.
func (d DeviceSet) DevicePrefix() string {
	prefix, _, _ := strings.Cut(d.Driver, ".")
	if len(prefix) > 58 {
		prefix = strings.TrimRight(prefix[:58], "-")
	}
	return prefix
}

// validateDeviceSets checks each set and that no driver comes twice.
func validateDeviceSets(sets []DeviceSet, where string) []error {
	var errs []error
	seen := map[string]bool{}
	for _, d := range sets {
		if err := d.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %w", where, d.Driver, err))
		}
		if seen[d.Driver] {
			errs = append(errs, fmt.Errorf("%s: driver %s is given twice; a node has one pool per driver", where, d.Driver))
		}
		seen[d.Driver] = true
	}
	return errs
}

// ResourceSliceName is the name of the slice a node publishes for a
// driver: fixed, so that a restarted process or a new Node of the same
// name finds and takes over the one left behind.
func ResourceSliceName(node, driver string) string {
	name := node + "-" + driver
	if len(name) > validation.DNS1123SubdomainMaxLength {
		name = strings.TrimRight(name[:validation.DNS1123SubdomainMaxLength], "-.")
	}
	return name
}

// ResourceSlice is the slice a node publishes for a device set: pool named
// after the node, one slice in it, owned by the Node as the kubelet's DRA
// plugin registration makes it (the garbage collector removes it with the
// Node).
func (d DeviceSet) ResourceSlice(node *v1.Node, generation int64) *resourceapi.ResourceSlice {
	model := d.Model
	if model == "" {
		model = DefaultDeviceModel
	}
	devices := make([]resourceapi.Device, d.Count)
	for i := range devices {
		devices[i] = resourceapi.Device{
			Name: fmt.Sprintf("%s-%d", d.DevicePrefix(), i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				DeviceAttributeModel: {StringValue: ptr.To(model)},
				DeviceAttributeIndex: {IntValue: ptr.To(int64(i))},
			},
		}
		if !d.Memory.IsZero() {
			devices[i].Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{DeviceCapacityMemory: {Value: d.Memory}}
		}
	}
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:   ResourceSliceName(node.Name, d.Driver),
			Labels: map[string]string{ManagedLabel: "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
				Controller: ptr.To(true)}},
		},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   d.Driver,
			Pool:     resourceapi.ResourcePool{Name: node.Name, Generation: generation, ResourceSliceCount: 1},
			NodeName: ptr.To(node.Name),
			Devices:  devices,
		},
	}
}

// DeviceClass selects every device of the set's driver.
func (d DeviceSet) DeviceClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: d.ClassName(), Labels: map[string]string{ManagedLabel: "true"}},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", d.Driver)}}}},
	}
}

// ensureDeviceClasses creates the DeviceClass of each driver unless one of
// its name exists (an administrator's own is left alone).
func (m *Manager) ensureDeviceClasses(ctx context.Context) error {
	done := map[string]bool{}
	for _, n := range m.nodes {
		for _, d := range n.devices {
			if done[d.ClassName()] {
				continue
			}
			done[d.ClassName()] = true
			_, err := m.cfg.Client.ResourceV1().DeviceClasses().Create(ctx, d.DeviceClass(), metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating DeviceClass %s for driver %s: %w", d.ClassName(), d.Driver, err)
			}
		}
	}
	return nil
}

// publishDevices writes the node's ResourceSlices. A slice left behind by
// an earlier Node of the name (a replaced machine whose old Node the
// garbage collector has not cleaned up after yet, or this process's last
// run) is taken over: owner and devices replaced, the pool's generation
// raised so that schedulers drop what they knew of the old one.
func (m *Manager) publishDevices(ctx context.Context, node *v1.Node, n *node) error {
	slicesClient := m.cfg.Client.ResourceV1().ResourceSlices()
	for _, d := range n.devices {
		var err error
		// A few attempts: the old slice may be deleted by the garbage
		// collector or changed between our read and our write.
		for attempt := 0; attempt < 5; attempt++ {
			want := d.ResourceSlice(node, 1)
			_, err = slicesClient.Create(ctx, want, metav1.CreateOptions{})
			if !apierrors.IsAlreadyExists(err) {
				break
			}
			var cur *resourceapi.ResourceSlice
			if cur, err = slicesClient.Get(ctx, want.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				continue
			} else if err != nil {
				break
			}
			if sliceCurrent(cur, want) {
				break
			}
			want = d.ResourceSlice(node, cur.Spec.Pool.Generation+1)
			want.ResourceVersion = cur.ResourceVersion
			if _, err = slicesClient.Update(ctx, want, metav1.UpdateOptions{}); !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("publishing the devices of node %s (ResourceSlice of driver %s): %w", node.Name, d.Driver, err)
		}
	}
	return nil
}

// sliceCurrent says whether a slice found is the one wanted: same owner,
// node and devices.
func sliceCurrent(cur, want *resourceapi.ResourceSlice) bool {
	return len(cur.OwnerReferences) == 1 && cur.OwnerReferences[0].UID == want.OwnerReferences[0].UID &&
		ptr.Deref(cur.Spec.NodeName, "") == ptr.Deref(want.Spec.NodeName, "") && cur.Spec.Driver == want.Spec.Driver &&
		cur.Spec.Pool.Name == want.Spec.Pool.Name && cur.Spec.Pool.ResourceSliceCount == 1 &&
		apiequality.Semantic.DeepEqual(cur.Spec.Devices, want.Spec.Devices)
}

// nodeDevices are a node's device sets: every node's, then its group's.
func (c *Config) nodeDevices(g *NodeGroup) []DeviceSet {
	if g == nil || len(g.Devices) == 0 {
		return c.Devices
	}
	return append(slices.Clone(c.Devices), g.Devices...)
}
