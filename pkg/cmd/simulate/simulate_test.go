package simulate

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
)

// The chaos flags are checked before anything runs: usage errors (exit 2)
// that name what is wrong and what to do.
func TestChaosFlagValidation(t *testing.T) {
	dir := t.TempDir()
	write := func(name, timeline string) string {
		p := filepath.Join(dir, name)
		sc := "apiVersion: nodeshepherd.io/v1alpha1\nkind: Scenario\nname: " + strings.TrimSuffix(name, ".yaml") +
			"\nduration: 2m\ncluster:\n  zones:\n  - {name: zone-a, nodes: 3}\n  node: {cpu: \"8\", memory: 32Gi}\ntimeline:\n" + timeline
		if err := os.WriteFile(p, []byte(sc), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain := write("plain.yaml", "- {at: 10s, action: network-blip, for: 20s, nodes: [fake-node-0000]}\n")
	deleting := write("deleting.yaml", "- {at: 10s, action: machine-delete, nodes: [fake-node-0001]}\n")
	for _, tc := range []struct {
		name string
		args []string
		want []string // in the error; none: valid
	}{
		{"seed alone", []string{plain, "--validate", "--chaos-seed", "7"}, nil},
		{"node kinds", []string{plain, "--validate", "--chaos-seed", "7", "--chaos-faults", "reboot, zone-partition"}, nil},
		{"faults without a seed", []string{plain, "--validate", "--chaos-faults", "reboot"}, []string{"--chaos-faults needs --chaos-seed"}},
		{"kinds simulate cannot apply", []string{plain, "--validate", "--chaos-seed", "7", "--chaos-faults", "reboot,leader-kill,watch-stall"},
			[]string{"simulate cannot apply leader-kill, watch-stall", "make chaos", "simulate applies node-partition"}},
		{"unknown kind", []string{plain, "--validate", "--chaos-seed", "7", "--chaos-faults", "meteor"}, []string{`unknown fault kind(s) meteor`, "kinds: node-partition"}},
		{"empty kinds", []string{plain, "--validate", "--chaos-seed", "7", "--chaos-faults", ","}, []string{"no fault kind given"}},
		{"bad seed", []string{plain, "--validate", "--chaos-seed", "x"}, []string{"chaos-seed"}},
		{"machine-delete in the scenario", []string{deleting, "--validate", "--chaos-seed", "7"}, []string{"deleting.yaml", "machine-delete at 10s", "run without --chaos-seed"}},
		{"machine-delete without chaos", []string{deleting, "--validate"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCommand()
			var out bytes.Buffer
			c.SetOut(&out)
			c.SetErr(&out)
			c.SetArgs(tc.args)
			err := c.Execute()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("%v: %v", tc.args, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("%v: no error, want %q", tc.args, tc.want)
			}
			var ue *cli.UsageError
			if !errors.As(err, &ue) && !strings.Contains(err.Error(), "invalid argument") {
				t.Errorf("%v: %T %v is not a usage error (exit 2)", tc.args, err, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: error %q does not say %q", tc.args, err, w)
				}
			}
		})
	}
}

// --nodes is checked before anything runs: the kinds, and what hollow
// nodes cannot do yet (usage errors, exit 2, naming file:line).
func TestNodesFlagValidation(t *testing.T) {
	dir := t.TempDir()
	write := func(name, node string) string {
		p := filepath.Join(dir, name)
		sc := "apiVersion: nodeshepherd.io/v1alpha1\nkind: Scenario\nname: " + strings.TrimSuffix(name, ".yaml") +
			"\nduration: 2m\ncluster:\n  zones:\n  - {name: zone-a, nodes: 2}\n" + node +
			"timeline:\n- {at: 10s, action: partition, for: 20s, nodes: [fake-node-0000]}\n"
		if err := os.WriteFile(p, []byte(sc), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain := write("plain.yaml", "")
	sized := write("sized.yaml", "  node: {cpu: \"8\"}\n")
	hollow := write("hollow.yaml", "  nodeKind: hollow\n")
	for _, tc := range []struct {
		name string
		args []string
		want []string // in the error; none: valid
	}{
		{"hollow", []string{plain, "--validate", "--nodes", "hollow"}, nil},
		{"both", []string{plain, "--validate", "--nodes", "fake,hollow"}, nil},
		{"unknown kind", []string{plain, "--validate", "--nodes", "kwok"}, []string{`"kwok" is no node kind; give fake, hollow`}},
		{"twice", []string{plain, "--validate", "--nodes", "fake,fake"}, []string{"fake is named twice"}},
		{"hollow scaled", []string{plain, "--validate", "--nodes", "hollow", "--time-scale", "5"}, []string{"--time-scale 5: hollow nodes run at --time-scale 1 only"}},
		{"fake scaled", []string{plain, "--validate", "--nodes", "fake", "--time-scale", "5"}, nil},
		{"capacity on hollow", []string{sized, "--validate", "--nodes", "fake,hollow"}, []string{"sized.yaml:8: cluster.node.cpu on hollow nodes"}},
		{"hollow scenario scaled", []string{hollow, "--validate", "--time-scale", "2"}, []string{"--time-scale 2: hollow nodes run at --time-scale 1 only"}},
		{"hollow scenario on fake nodes scaled", []string{hollow, "--validate", "--nodes", "fake", "--time-scale", "2"}, nil},
		{"hollow with chaos", []string{hollow, "--validate", "--chaos-seed", "7"}, []string{"--chaos-seed on hollow nodes is not implemented"}},
		{"kubelet -v on hollow", []string{plain, "--validate", "--nodes", "fake,hollow", "--kubelet-v", "6"}, nil},
		{"kubelet -v on a hollow scenario", []string{hollow, "--validate", "--kubelet-v", "6"}, nil},
		{"kubelet -v on fake nodes", []string{plain, "--validate", "--kubelet-v", "6"}, []string{"--kubelet-v=6: only hollow nodes have a kubelet", "--nodes hollow"}},
		{"negative kubelet -v", []string{hollow, "--validate", "--kubelet-v=-1"}, []string{"--kubelet-v must be 0 or more"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCommand()
			var out bytes.Buffer
			c.SetOut(&out)
			c.SetErr(&out)
			c.SetArgs(tc.args)
			err := c.Execute()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("%v: %v", tc.args, err)
				}
				return
			}
			var ue *cli.UsageError
			if err == nil || !errors.As(err, &ue) {
				t.Fatalf("%v: %T %v, want a usage error (exit 2) saying %q", tc.args, err, err, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: error %q does not say %q", tc.args, err, w)
				}
			}
		})
	}
}
