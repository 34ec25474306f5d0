package main

import (
	"strings"
	"testing"

	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kubemark/app"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
)

const testBootID = "0f5c2a4e-8b1d-4c3e-9a7f-2d6b8e1c4a90"

// TestReadHollowFlags: kubemark's own flags, parsed by upstream's flag set,
// are read back as given; what --boot-id cannot take is refused naming
// the flag.
func TestReadHollowFlags(t *testing.T) {
	parse := func(t *testing.T, args ...string) (*hollowFlags, error) {
		t.Helper()
		cmd := app.NewHollowNodeCommand()
		withBootID(cmd)
		if err := cmd.Flags().Parse(args); err != nil {
			t.Fatal(err)
		}
		id, err := cmd.Flags().GetString(bootIDFlag)
		if err != nil {
			t.Fatal(err)
		}
		return readHollowFlags(cmd.Flags(), id)
	}
	h, err := parse(t, "--morph=kubelet", "--name=n1", "--kubeconfig=/k", "--kubelet-port=1234", "--kubelet-read-only-port=0",
		"--max-pods=30", "--node-labels=a=b,topology.kubernetes.io/zone=z", "--register-with-taints=k=v:NoSchedule",
		"--extended-resources=example.com/gpu=2", "--use-host-image-service=false", "--kube-api-qps=7", "--boot-id="+testBootID)
	if err != nil {
		t.Fatal(err)
	}
	if h.bootID != testBootID || h.name != "n1" || h.kubeconfig != "/k" || h.kubeletPort != 1234 || h.readOnlyPort != 0 || h.maxPods != 30 ||
		h.useHostImageService || h.qps != 7 || h.burst != 20 {
		t.Errorf("read %+v", h)
	}
	if h.nodeLabels["a"] != "b" || h.nodeLabels["topology.kubernetes.io/zone"] != "z" || len(h.nodeLabels) != 2 {
		t.Errorf("node labels %v", h.nodeLabels)
	}
	if len(h.registerWithTaints) != 1 || h.registerWithTaints[0].Key != "k" || h.registerWithTaints[0].Effect != "NoSchedule" {
		t.Errorf("taints %v", h.registerWithTaints)
	}
	if h.extendedResources["example.com/gpu"] != "2" {
		t.Errorf("extended resources %v", h.extendedResources)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--morph=proxy", "--boot-id=" + testBootID}, `--boot-id: only the kubelet reports a boot ID, and --morph is "proxy"`},
		{[]string{"--morph=kubelet", "--boot-id=42"}, `--boot-id "42": not a UUID`},
		{[]string{"--morph=kubelet", "--boot-id={" + testBootID + "}"}, "not a UUID of the form xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"},
	} {
		if _, err := parse(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want %q", c.args, err, c.want)
		}
	}
}

func TestBootCAdvisorReportsTheBootID(t *testing.T) {
	fake := &cadvisortest.Fake{NodeName: "n1"}
	want, _ := fake.MachineInfo(klog.Background())
	got, err := (&bootCAdvisor{Fake: fake, bootID: testBootID}).MachineInfo(klog.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got.BootID != testBootID || got.NumCores != want.NumCores || got.MemoryCapacity != want.MemoryCapacity || got.InstanceID != want.InstanceID {
		t.Errorf("machine info %+v, want the fake's with boot ID %s", got, testBootID)
	}
}

func TestRebootMessage(t *testing.T) {
	msg := "Node n1 has been rebooted, boot id: " + testBootID
	if got, ok := rebootMessage("Warning Rebooted " + msg); !ok || got != msg {
		t.Errorf("got %q %v", got, ok)
	}
	for _, line := range []string{"Normal Starting Starting kubelet.", "Normal NodeReady Node n1 status is now: NodeReady", "Normal Rebooted x"} {
		if _, ok := rebootMessage(line); ok {
			t.Errorf("%q taken for a reboot", line)
		}
	}
}
