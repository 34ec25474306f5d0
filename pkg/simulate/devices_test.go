package simulate

import (
	"strings"
	"testing"
)

// cluster.devices: every node's sets in the fake nodes' Devices, a set for
// node groups in those groups'; each refusal names file:line and what to
// write.
func TestScenarioDevices(t *testing.T) {
	withDevices := func(devices string) string {
		text := strings.Replace(validScenario, "  node: {cpu: \"4\", memory: 8Gi}\n", "  node: {cpu: \"4\", memory: 8Gi}\n  devices:\n"+devices, 1)
		if text == validScenario {
			t.Fatal("test bug: node line not found")
		}
		return text
	}
	sc, err := Load(writeScenario(t, withDevices("  - {driver: gpu.fake.nodeshepherd.io, count: 4, model: a100, memory: 80Gi}\n")))
	if err != nil {
		t.Fatal(err)
	}
	f := sc.fakeNodeConfig(1)
	if len(f.Devices) != 1 || f.Devices[0].String() != "gpu.fake.nodeshepherd.io=4,model=a100,memory=80Gi" {
		t.Errorf("devices %+v", f.Devices)
	}

	groups := strings.Replace(validScenario, "cluster:\n  zones:\n  - {name: zone-a, nodes: 2}\n  - {name: zone-b, nodes: 1}\n  node: {cpu: \"4\", memory: 8Gi}\n",
		groupsCluster+"  devices:\n  - {driver: gpu.fake.nodeshepherd.io, count: 2, nodeGroups: [a-big]}\n  - {driver: nic.fake.nodeshepherd.io, count: 1}\n", 1)
	sc, err = Load(writeScenario(t, groups))
	if err != nil {
		t.Fatal(err)
	}
	f = sc.fakeNodeConfig(1)
	if len(f.Devices) != 1 || f.Devices[0].Driver != "nic.fake.nodeshepherd.io" || len(f.Groups[0].Devices) != 1 ||
		f.Groups[0].Devices[0].Driver != "gpu.fake.nodeshepherd.io" || len(f.Groups[1].Devices) != 0 {
		t.Errorf("devices %+v, groups %+v", f.Devices, f.Groups)
	}

	for _, c := range []struct{ name, text, want string }{
		{"no count", withDevices("  - {driver: gpu.example.com}\n"), ":16: cluster.devices[0]: give driver and count"},
		{"too many", withDevices("  - {driver: gpu.example.com, count: 200}\n"), ":16: cluster.devices[0]: count 200 must be from 1 to 128"},
		{"bad driver", withDevices("  - {driver: GPU, count: 1}\n"), `:16: cluster.devices[0]: driver "GPU" must be a lowercase DNS subdomain`},
		{"bad model", withDevices("  - {driver: gpu.example.com, count: 1, model: a b}\n"), `:16: cluster.devices[0]: model "a b"`},
		{"bad memory", withDevices("  - {driver: gpu.example.com, count: 1, memory: lots}\n"), `:16: invalid quantity "lots"`},
		{"unknown field", withDevices("  - {driver: gpu.example.com, count: 1, colour: red}\n"), ":16: field colour not found"},
		{"twice", withDevices("  - {driver: gpu.example.com, count: 1}\n  - {driver: gpu.example.com, count: 2}\n"), ":17: cluster.devices[1]: driver gpu.example.com is given to some nodes twice"},
		{"groups without node groups", withDevices("  - {driver: gpu.example.com, count: 1, nodeGroups: [a]}\n"), ":16: cluster.devices[0]: nodeGroups: the cluster has no nodeGroups"},
		{"unknown group", strings.Replace(groups, "nodeGroups: [a-big]", "nodeGroups: [a-small]", 1), `cluster.devices[0]: unknown node group "a-small"; the cluster's node groups: a-big, b-general`},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := writeScenario(t, c.text)
			_, err := Load(p)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("error %v\nwant %q and the file's name", err, c.want)
			}
		})
	}
}

// Hollow nodes refuse cluster.devices: kubemark runs no DRA driver.
func TestHollowScenarioRefusesDevices(t *testing.T) {
	text := strings.Replace(hollowScenario, "  node: {maxPods: 30,", "  devices: [{driver: gpu.example.com, count: 1}]\n  node: {maxPods: 30,", 1)
	if text == hollowScenario {
		t.Fatal("test bug")
	}
	p := writeScenario(t, text)
	_, err := Load(p)
	want := p + `:12: cluster.devices on hollow nodes: not implemented: kubemark runs no DRA driver`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v\nwant %q", err, want)
	}
	// On fake nodes it loads; --nodes hollow refuses it the same way.
	fakePath := writeScenario(t, strings.Replace(text, "  nodeKind: hollow\n", "", 1))
	sc, err := Load(fakePath)
	if err != nil {
		t.Fatalf("on fake nodes: %v", err)
	}
	if err := sc.CheckNodes(NodeKindHollow, 1); err == nil || !strings.Contains(err.Error(), fakePath+":11: cluster.devices on hollow nodes") {
		t.Errorf("--nodes hollow: %v", err)
	}
}
