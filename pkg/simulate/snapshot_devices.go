package simulate

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
)

// driverSelector is the one CEL selector of a DeviceClass that the fake
// nodes can make again: every device of one driver.
var driverSelector = regexp.MustCompile(`^\s*device\.driver\s*==\s*"([^"\\]+)"\s*$`)

// readDevices reads the node-local ResourceSlices (the newest generation of
// each pool) and the DeviceClasses, and returns by node the device sets it
// publishes, in the fake nodes' terms: per driver the number of devices,
// and the model attribute and memory capacity of the first device. A
// cluster that serves no resource.k8s.io/v1 has none.
func (s *Snapshot) readDevices(ctx context.Context, c kubernetes.Interface) (map[string][]fakenode.DeviceSet, error) {
	list, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing ResourceSlices (resource.k8s.io/v1; the snapshot needs list on resourceslices and deviceclasses): %w", err)
	}
	newest := map[[2]string]int64{} // driver, pool -> generation
	for _, sl := range list.Items {
		k := [2]string{sl.Spec.Driver, sl.Spec.Pool.Name}
		newest[k] = max(newest[k], sl.Spec.Pool.Generation)
	}
	type nodeDriver struct{ node, driver string }
	devices := map[nodeDriver][]resourceapi.Device{}
	leftOut := map[string]bool{}
	for _, sl := range list.Items {
		if sl.Spec.Pool.Generation < newest[[2]string{sl.Spec.Driver, sl.Spec.Pool.Name}] {
			continue // an older generation, being replaced
		}
		node := ptr.Deref(sl.Spec.NodeName, "")
		if node == "" {
			leftOut[sl.Spec.Driver] = true
			continue
		}
		k := nodeDriver{node, sl.Spec.Driver}
		devices[k] = append(devices[k], sl.Spec.Devices...)
	}
	for _, d := range slices.Sorted(maps.Keys(leftOut)) {
		s.note("devices of driver %s that are not a node's own (allNodes, nodeSelector or per-device node selection) left out: the fake nodes publish node-local devices only", d)
	}
	classes, err := c.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("listing DeviceClasses: %w", err)
	}
	drivers := map[string]bool{}
	for k := range devices {
		drivers[k.driver] = true
	}
	classOf := map[string]string{}
	if classes != nil {
		sort.Slice(classes.Items, func(i, j int) bool { return classes.Items[i].Name < classes.Items[j].Name })
		for _, dc := range classes.Items {
			driver := ""
			if sel := dc.Spec.Selectors; len(sel) == 1 && sel[0].CEL != nil && len(dc.Spec.Config) == 0 && dc.Spec.ExtendedResourceName == nil {
				if m := driverSelector.FindStringSubmatch(sel[0].CEL.Expression); m != nil {
					driver = m[1]
				}
			}
			switch {
			case driver == "" || !drivers[driver]:
				s.note("DeviceClass %s left out: the fake nodes make one class per driver of the nodes' devices, selecting device.driver == DRIVER", dc.Name)
			case classOf[driver] != "":
				s.note("DeviceClass %s left out: %s already selects every device of driver %s", dc.Name, classOf[driver], driver)
			default:
				classOf[driver] = dc.Name
			}
		}
	}
	out := map[string][]fakenode.DeviceSet{}
	for _, k := range slices.SortedFunc(maps.Keys(devices), func(a, b nodeDriver) int {
		return strings.Compare(a.node+"\x00"+a.driver, b.node+"\x00"+b.driver)
	}) {
		devs := devices[k]
		set := fakenode.DeviceSet{Driver: k.driver, Count: min(len(devs), resourceapi.ResourceSliceMaxDevices)}
		if len(devs) > resourceapi.ResourceSliceMaxDevices {
			s.note("node %s: %d devices of driver %s, more than the %d a fake node publishes: %d kept", k.node, len(devs), k.driver, resourceapi.ResourceSliceMaxDevices, set.Count)
		}
		if set.Count > 0 {
			if a, ok := devs[0].Attributes[fakenode.DeviceAttributeModel]; ok && a.StringValue != nil {
				set.Model = *a.StringValue
			}
			if c, ok := devs[0].Capacity[fakenode.DeviceCapacityMemory]; ok {
				set.Memory = c.Value
			}
		}
		if cl := classOf[k.driver]; cl != "" && cl != k.driver {
			set.Class = cl
		}
		if err := set.Validate(); err != nil || set.Count == 0 {
			// A model the fake nodes cannot write, say: the devices are kept without it.
			set.Model = ""
			if err := set.Validate(); err != nil || set.Count == 0 {
				s.note("node %s: devices of driver %s left out: %v", k.node, k.driver, err)
				continue
			}
		}
		out[k.node] = append(out[k.node], set)
	}
	return out, nil
}

// deviceEntries are cluster.devices: each distinct set once, with the groups
// that have it (none when every group does).
func (s *Snapshot) deviceEntries() []DeviceSet {
	var out []DeviceSet
	byKey := map[string]int{}
	for _, g := range s.Groups {
		for _, d := range g.devices {
			k := d.String()
			i, ok := byKey[k]
			if !ok {
				i = len(out)
				byKey[k] = i
				out = append(out, DeviceSet{Driver: d.Driver, Count: d.Count, Model: d.Model, Memory: Quantity{d.Memory}, Class: d.Class})
			}
			out[i].NodeGroups = append(out[i].NodeGroups, g.Name)
		}
	}
	for i := range out {
		if len(out[i].NodeGroups) == len(s.Groups) {
			out[i].NodeGroups = nil
		}
	}
	return out
}

// writeDevices writes cluster.devices, one set a line.
func (s *Snapshot) writeDevices(b *bytes.Buffer) {
	entries := s.deviceEntries()
	if len(entries) == 0 {
		return
	}
	b.WriteString("  # The nodes' DRA devices (their ResourceSlices), per driver: how many a node has, the first\n" +
		"  # device's model attribute and memory capacity; the fake nodes create the DeviceClass (class).\n" +
		"  devices:\n")
	for _, d := range entries {
		fmt.Fprintf(b, "  - {driver: %s, count: %d", d.Driver, d.Count)
		if d.Model != "" {
			fmt.Fprintf(b, ", model: %s", flowScalar(d.Model))
		}
		if !d.Memory.IsZero() {
			fmt.Fprintf(b, ", memory: %s", d.Memory.String())
		}
		if d.Class != "" {
			fmt.Fprintf(b, ", class: %s", d.Class)
		}
		if len(d.NodeGroups) > 0 {
			fmt.Fprintf(b, ", nodeGroups: [%s]", strings.Join(d.NodeGroups, ", "))
		}
		b.WriteString("}\n")
	}
}

// readClaimTemplates adds the ResourceClaimTemplates of the namespaces
// read, so that the workloads' pods get their claims in the simulation;
// a request for a DeviceClass that cluster.devices does not make is noted
// (its pods would stay pending).
func (s *Snapshot) readClaimTemplates(ctx context.Context, c kubernetes.Interface, o SnapshotOptions) error {
	list, err := c.ResourceV1().ResourceClaimTemplates("").List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing ResourceClaimTemplates: %w", err)
	}
	classes := map[string]bool{}
	for _, g := range s.Groups {
		for _, d := range g.devices {
			classes[d.ClassName()] = true
		}
	}
	for i := range list.Items {
		rct := &list.Items[i]
		if skipNamespace(rct.Namespace, o) {
			continue
		}
		for _, r := range rct.Spec.Spec.Devices.Requests {
			names := []string{}
			if r.Exactly != nil {
				names = append(names, r.Exactly.DeviceClassName)
			}
			for _, sub := range r.FirstAvailable {
				names = append(names, sub.DeviceClassName)
			}
			for _, n := range names {
				if !classes[n] {
					s.note("ResourceClaimTemplate %s/%s: request %s asks for DeviceClass %s, which no node's devices in cluster.devices make: its pods will stay pending", rct.Namespace, rct.Name, r.Name, n)
				}
			}
		}
		s.add(rct.Namespace, &resourceapi.ResourceClaimTemplate{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaimTemplate"},
			ObjectMeta: cleanMeta(rct.ObjectMeta), Spec: *rct.Spec.DeepCopy()})
	}
	return nil
}
