package simulate

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// snapSlice is a node's slice of n devices of a driver.
func snapSlice(node, driver string, n int, generation int64) *resourceapi.ResourceSlice {
	devs := make([]resourceapi.Device, n)
	for i := range devs {
		devs[i] = resourceapi.Device{Name: "d" + string(rune('a'+i)),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: ptr.To("h100")}},
			Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}}}
	}
	return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-" + driver + "-" + string(rune('0'+generation))},
		Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, Generation: generation, ResourceSliceCount: 1}, Devices: devs}}
}

// A snapshot records the nodes' devices: the db nodes of zone a have GPUs
// (a class named gpu selects them), those of zone b too: one cluster.devices
// entry for both groups; a node-wide (allNodes) slice and a class with
// another selector are left out with a note; an old pool generation is not
// counted. The nodes with devices form groups of their own. The scenario
// written loads, and its fake nodes get the same devices.
func TestSnapshotDevices(t *testing.T) {
	objs := append(snapshotCluster(),
		snapSlice("a4", "gpu.example.com", 2, 1), snapSlice("a4", "gpu.example.com", 5, 0),
		snapSlice("b3", "gpu.example.com", 2, 3),
		// a2 has a NIC the others of its group lack: a group of its own.
		snapSlice("a2", "nic.example.com", 1, 1),
		&resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "net"}, Spec: resourceapi.ResourceSliceSpec{Driver: "net.example.com", AllNodes: ptr.To(true),
			Pool: resourceapi.ResourcePool{Name: "net", ResourceSliceCount: 1}, Devices: []resourceapi.Device{{Name: "x"}}}},
		&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{
			{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpu.example.com"`}}}}},
		&resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "one-gpu", Namespace: "shop", UID: "t1", ResourceVersion: "7"},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
				{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu"}}}}}}},
		&resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "one-fpga", Namespace: "shop"},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
				{Name: "fpga", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "fpga"}}}}}}},
		&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "big-gpu"}, Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{
			{CEL: &resourceapi.CELDeviceSelector{Expression: `device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0`}}}}},
	)
	s, err := TakeSnapshot(context.Background(), fake.NewClientset([]runtime.Object(objs)...), SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	entries := s.deviceEntries()
	if len(entries) != 2 {
		t.Fatalf("cluster.devices %+v, want 2 entries", entries)
	}
	gpu, nic := entries[0], entries[1]
	if gpu.Driver != "gpu.example.com" || gpu.Count != 2 || gpu.Model != "h100" || gpu.Memory.String() != "80Gi" || gpu.Class != "gpu" ||
		len(gpu.NodeGroups) != 2 || !strings.Contains(gpu.NodeGroups[0], "zone-a") || !strings.Contains(gpu.NodeGroups[1], "zone-b") {
		t.Errorf("gpu entry %+v", gpu)
	}
	if nic.Driver != "nic.example.com" || nic.Count != 1 || len(nic.NodeGroups) != 1 {
		t.Errorf("nic entry %+v", nic)
	}
	if len(s.Groups) != 5 {
		t.Errorf("%d groups, want 5 (a2 with its NIC alone)", len(s.Groups))
	}
	// The workloads' claim templates come along (cleaned), one asking for a
	// class the devices do not make noted.
	var templates []string
	for _, o := range s.Namespaces["shop"] {
		if rct, ok := o.(*resourceapi.ResourceClaimTemplate); ok {
			templates = append(templates, rct.Name)
			if rct.UID != "" || rct.ResourceVersion != "" || rct.Kind != "ResourceClaimTemplate" {
				t.Errorf("template %s not cleaned: %+v", rct.Name, rct.ObjectMeta)
			}
		}
	}
	if strings.Join(templates, ",") != "one-fpga,one-gpu" && strings.Join(templates, ",") != "one-gpu,one-fpga" {
		t.Errorf("templates %v", templates)
	}
	notes := strings.Join(s.Notes, "\n")
	for _, want := range []string{"devices of driver net.example.com that are not a node's own", "DeviceClass big-gpu left out",
		"ResourceClaimTemplate shop/one-fpga: request fpga asks for DeviceClass fpga, which no node's devices in cluster.devices make"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	var sum bytes.Buffer
	s.PrintSummary(&sum)
	if !strings.Contains(sum.String(), "Devices: 2 of gpu.example.com a node (") {
		t.Errorf("summary:\n%s", sum.String())
	}
	dir := filepath.Join(t.TempDir(), "out")
	if _, err := PrepareOutput(dir, false); err != nil {
		t.Fatal(err)
	}
	path, _, err := s.Write(dir, "gpus", "context test (https://x)", false)
	if err != nil {
		t.Fatal(err)
	}
	if testing.Verbose() {
		data, _ := os.ReadFile(path)
		t.Logf("%s", data)
	}
	sc, err := Load(path)
	if err != nil {
		t.Fatalf("the scenario written does not load: %v", err)
	}
	cfg := sc.fakeNodeConfig(1)
	with := 0
	for _, g := range cfg.Groups {
		for _, d := range g.Devices {
			if d.String() == "gpu.example.com=2,model=h100,memory=80Gi,class=gpu" {
				with += g.Count
			}
		}
	}
	if len(sc.Workloads) == 0 {
		t.Error("no workloads written")
	}
	if with != 2 || len(cfg.Devices) != 0 {
		t.Errorf("%d nodes with the GPUs, every node's devices %v; want 2 and none", with, cfg.Devices)
	}
}
