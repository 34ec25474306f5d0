package fakenode

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestParseDeviceSet(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "gpu.fake.nodeshepherd.io=4", want: "gpu.fake.nodeshepherd.io=4"},
		{in: "gpu.example.com=2,model=a100,memory=80Gi,class=gpu", want: "gpu.example.com=2,model=a100,memory=80Gi,class=gpu"},
		{in: "gpu.example.com", err: "expected DRIVER=COUNT"},
		{in: "gpu.example.com=0", err: "from 1 to 128"},
		{in: "gpu.example.com=129", err: "from 1 to 128"},
		{in: "gpu.example.com=x", err: "whole number"},
		{in: "GPU=1", err: "lowercase DNS subdomain"},
		{in: "gpu.example.com=1,model=a b", err: "model"},
		{in: "gpu.example.com=1,memory=lots", err: "not a quantity"},
		{in: "gpu.example.com=1,colour=red", err: "unknown key"},
		{in: "gpu.example.com=1,model=a,model=b", err: "each once"},
		{in: "gpu.example.com=1,class=Bad_Class", err: "DeviceClass"},
	} {
		d, err := ParseDeviceSet(tc.in)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), tc.in) {
				t.Errorf("ParseDeviceSet(%q) = %v, %v; want an error quoting the input and saying %q", tc.in, d, err, tc.err)
			}
		case err != nil:
			t.Errorf("ParseDeviceSet(%q): %v", tc.in, err)
		case d.String() != tc.want:
			t.Errorf("ParseDeviceSet(%q) prints as %q, want %q", tc.in, d.String(), tc.want)
		}
	}
}

// TestDeviceSetResourceSlice: one slice per node and driver, pool named
// after the node, owned by the Node, devices PREFIX-i with model, index and
// memory.
func TestDeviceSetResourceSlice(t *testing.T) {
	d := DeviceSet{Driver: "gpu.fake.nodeshepherd.io", Count: 3, Memory: resource.MustParse("80Gi")}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "fake-node-0001", UID: "u1"}}
	s := d.ResourceSlice(node, 2)
	if s.Name != "fake-node-0001-gpu.fake.nodeshepherd.io" || s.Spec.Driver != d.Driver || ptr.Deref(s.Spec.NodeName, "") != node.Name ||
		s.Spec.Pool != (resourceapi.ResourcePool{Name: node.Name, Generation: 2, ResourceSliceCount: 1}) {
		t.Errorf("slice %s: %+v", s.Name, s.Spec)
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "Node" || s.OwnerReferences[0].UID != "u1" || !ptr.Deref(s.OwnerReferences[0].Controller, false) {
		t.Errorf("owner %+v", s.OwnerReferences)
	}
	if len(s.Spec.Devices) != 3 || s.Spec.Devices[2].Name != "gpu-2" {
		t.Fatalf("devices %+v", s.Spec.Devices)
	}
	dev := s.Spec.Devices[2]
	if ptr.Deref(dev.Attributes[DeviceAttributeModel].StringValue, "") != DefaultDeviceModel || ptr.Deref(dev.Attributes[DeviceAttributeIndex].IntValue, -1) != 2 {
		t.Errorf("attributes %+v", dev.Attributes)
	}
	if q := dev.Capacity[DeviceCapacityMemory].Value; q.Cmp(resource.MustParse("80Gi")) != 0 {
		t.Errorf("memory %s", q.String())
	}
	if !sliceCurrent(s, d.ResourceSlice(node, 7)) {
		t.Error("a slice of another generation should be current")
	}
	if sliceCurrent(s, d.ResourceSlice(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name, UID: "u2"}}, 2)) {
		t.Error("a slice of the old Node should not be current")
	}
	if c := d.DeviceClass(); c.Name != d.Driver || c.Spec.Selectors[0].CEL.Expression != `device.driver == "gpu.fake.nodeshepherd.io"` {
		t.Errorf("class %s: %+v", c.Name, c.Spec)
	}
	long := DeviceSet{Driver: strings.Repeat("a", 60) + ".io", Count: 1}
	if p := long.DevicePrefix(); len(p+"-127") > 63 {
		t.Errorf("prefix %q too long", p)
	}
}

// TestWithPreparedDevices: this node's drivers' devices get a Ready
// status entry; other drivers' and other pools' are left alone, and a
// second pass changes nothing.
func TestWithPreparedDevices(t *testing.T) {
	sets := []DeviceSet{{Driver: "gpu.example.com", Count: 2}}
	claim := &resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "a", Driver: "gpu.example.com", Pool: "n1", Device: "gpu-1"},
			{Request: "b", Driver: "nic.example.com", Pool: "n1", Device: "nic-0"},
			{Request: "c", Driver: "gpu.example.com", Pool: "n2", Device: "gpu-0"},
		}}}}}
	now := metav1.Now()
	out, changed := withPreparedDevices(claim, "n1", sets, now)
	if !changed || len(out.Status.Devices) != 1 {
		t.Fatalf("changed %v, devices %+v", changed, out.Status.Devices)
	}
	st := out.Status.Devices[0]
	if st.Driver != "gpu.example.com" || st.Pool != "n1" || st.Device != "gpu-1" || len(st.Conditions) != 1 ||
		st.Conditions[0].Type != "Ready" || st.Conditions[0].Status != metav1.ConditionTrue || st.Conditions[0].Reason == "" {
		t.Errorf("status %+v", st)
	}
	if len(claim.Status.Devices) != 0 {
		t.Error("the input claim was changed")
	}
	if _, again := withPreparedDevices(out, "n1", sets, now); again {
		t.Error("a prepared claim changed again")
	}
}

func TestValidateDeviceSets(t *testing.T) {
	c := Config{Nodes: 1, Devices: []DeviceSet{{Driver: "gpu.example.com", Count: 1}},
		Groups: []NodeGroup{{Name: "g", Zone: "z", Count: 1, Devices: []DeviceSet{{Driver: "gpu.example.com", Count: 2}}}}}
	c.Complete()
	err := c.ValidateSettings()
	if err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("a driver in both every node's and a group's devices: %v", err)
	}
}
