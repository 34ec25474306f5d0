package explain

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
	"github.com/nodeshepherd/nodeshepherd/pkg/explain"
)

func TestNodeOptionsFromTheConfigFileWithTheSharedSettings(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte(`apiVersion: nodeshepherd.io/v1alpha1
kind: NodeShepherdConfiguration
manager:
  controllers: ["*", "outofservice"]
shared:
  unhealthyZoneThreshold: 0.7
  maxUnhealthyNodes: "3"
nodeLifecycle:
  nodeMonitorGracePeriod: 40s
drain:
  drainCondition: ["KernelDeadlock=True,10m"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := nodeOptions(file)
	if err != nil {
		t.Fatal(err)
	}
	if o.Source != "file "+file || o.NodeLifecycle.NodeMonitorGracePeriod != 40*time.Second || o.NodeLifecycle.UnhealthyZoneThreshold != 0.7 ||
		o.Drain.UnhealthyZoneThreshold != 0.7 || o.Drain.Budget.MaxUnhealthyNodes != "3" || len(o.Drain.Conditions) != 1 {
		t.Errorf("options %+v", o)
	}

	def, err := nodeOptions("")
	if err != nil {
		t.Fatal(err)
	}
	if def.Source != "defaults" || def.NodeLifecycle.NodeMonitorGracePeriod != 50*time.Second || def.NodeLifecycle.NodeMonitorPeriod != 5*time.Second ||
		def.Drain.Configured() || def.Drain.Budget.MaxUnhealthyNodes != "45%" {
		t.Errorf("defaults %+v", def)
	}
}

func TestNodeOptionsBadFileIsAUsageError(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte("apiVersion: nodeshepherd.io/v1alpha1\nkind: NodeShepherdConfiguration\nnodeLifecycle:\n  nodeMonitorGracePeriod: -1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := nodeOptions(file)
	var usage *cli.UsageError
	if !errors.As(err, &usage) {
		t.Fatalf("err %v, want a usage error", err)
	}
}

func TestNodeOptionsCloudProviderForTheRemediationLadder(t *testing.T) {
	write := func(body string) string {
		file := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(file, []byte("apiVersion: nodeshepherd.io/v1alpha1\nkind: NodeShepherdConfiguration\n"+body), 0o600); err != nil {
			t.Fatal(err)
		}
		return file
	}
	for _, tc := range []struct {
		name, body string
		want       explain.CloudProvider
		note       string
	}{
		{"no file: unknown", "", explain.CloudProvider{}, ""},
		{"none", "shared:\n  maxUnhealthyNodes: \"3\"\n", explain.CloudProvider{Known: true}, ""},
		{"fake reboots", "cloudProvider:\n  cloudProvider: fake\n", explain.CloudProvider{Known: true, Name: "fake", Repairs: true, Fences: true}, ""},
		{"webhook reboots", "cloudProvider:\n  cloudProvider: webhook\n  cloudProviderWebhookUrl: https://repair.example\n",
			explain.CloudProvider{Known: true, Name: "webhook", Repairs: true, Fences: true}, ""},
		// Its CA file is on the controller's machine, not here.
		{"webhook not buildable here", "cloudProvider:\n  cloudProvider: webhook\n  cloudProviderWebhookUrl: https://repair.example\n  cloudProviderWebhookCaFile: /nonexistent/ca.pem\n",
			explain.CloudProvider{Known: true, Name: "webhook", Repairs: true, Fences: true}, "cannot tell here"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := ""
			if tc.body != "" {
				file = write(tc.body)
			}
			o, err := nodeOptions(file)
			if err != nil {
				t.Fatal(err)
			}
			got := o.Cloud
			note := got.Note
			got.Note = ""
			if got != tc.want || (tc.note == "") != (note == "") || !strings.Contains(note, tc.note) {
				t.Errorf("cloud %+v note %q, want %+v note %q", got, note, tc.want, tc.note)
			}
		})
	}
}
