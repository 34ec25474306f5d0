package scenario

import "testing"

func TestDefaultName(t *testing.T) {
	for in, want := range map[string]string{
		"prod/": "prod", "out/Prod Cluster.yaml": "prod-cluster", "prod/scenario.yaml": "prod", "/": "cluster-snapshot",
		".": "cluster-snapshot", "x/__.yml": "cluster-snapshot", "a.b": "a.b",
	} {
		if got := defaultName(in); got != want {
			t.Errorf("defaultName(%q) = %q, want %q", in, got, want)
		}
	}
}
