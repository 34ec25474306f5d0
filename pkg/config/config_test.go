package config

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

func testSections() []Section {
	var period time.Duration
	var rate float64
	var conds []string
	var name string
	return []Section{
		{Name: "shared", Register: func(fs *pflag.FlagSet) { fs.DurationVar(&period, "node-monitor-period", 5*time.Second, "") }},
		{Name: "nodeLifecycle", Register: func(fs *pflag.FlagSet) { fs.Float64Var(&rate, "node-eviction-rate", 0.1, "") }},
		{Name: "drain", Register: func(fs *pflag.FlagSet) {
			fs.StringArrayVar(&conds, "drain-condition", nil, "")
			fs.StringVar(&name, "node-cidr-mask-size-ipv4", "", "")
		}},
	}
}

func TestKeyRoundTrips(t *testing.T) {
	for _, flag := range []string{"node-monitor-period", "node-cidr-mask-size-ipv4", "leader-elect", "kubeconfig", "drain-condition"} {
		if got := flagName(Key(flag)); got != flag {
			t.Errorf("flagName(Key(%q)) = %q", flag, got)
		}
	}
	if Key("node-monitor-grace-period") != "nodeMonitorGracePeriod" {
		t.Error(Key("node-monitor-grace-period"))
	}
}

func TestReadSpellings(t *testing.T) {
	cases := []struct{ doc, want string }{
		{"nodeLifecycle: {nodeEvictionRate: 0.5}", ""},
		{"drain: {drainCondition: [A, B]}", ""},
		{"node-eviction-rate: 0.5", "f:1: c.node-eviction-rate is the old spelling; write nodeLifecycle.nodeEvictionRate"},
		{"--node-eviction-rate: 0.5", "f:1: c.--node-eviction-rate is the old spelling; write nodeLifecycle.nodeEvictionRate"},
		{"nodeEvictionRate: 0.5", "f:1: c.nodeEvictionRate is a setting, not a section; write nodeLifecycle.nodeEvictionRate"},
		{"drain:\n  node-monitor-period: 1s", "f:2: c.drain.node-monitor-period is the old spelling; write shared.nodeMonitorPeriod"},
		{"drain:\n  nodeMonitorPeriod: 1s", "f:2: unknown setting c.drain.nodeMonitorPeriod; it belongs to section shared: write shared.nodeMonitorPeriod"},
		{"nodelifecycle: {}", `f:1: unknown section "c.nodelifecycle"; sections: shared, nodeLifecycle, drain`},
		{"drain: {drainCondition: [{a: b}]}", "f:1: c.drain.drainCondition: list items must be plain values"},
	}
	for _, c := range cases {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(c.doc), &n); err != nil {
			t.Fatal(err)
		}
		sets, err := Read("f", n.Content[0], "c.", testSections())
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v", c.doc, err)
		case c.want == "" && len(sets) != 1:
			t.Errorf("%q: %d assignments", c.doc, len(sets))
		case c.want != "" && (err == nil || err.Error() != c.want):
			t.Errorf("%q: error %v, want %q", c.doc, err, c.want)
		}
	}
}

var located = regexp.MustCompile(`^f:\d+: `)

// FuzzRead: any YAML gives assignments or errors that name the line, never
// a panic; assignments that pass Check can be Set.
func FuzzRead(f *testing.F) {
	for _, seed := range []string{
		"nodeLifecycle: {nodeEvictionRate: 0.5}\nshared:\n  nodeMonitorPeriod: 1s\n",
		"drain: {drainCondition: [A, B], nodeCidrMaskSizeIpv4: x}",
		"node-monitor-period: 2s", "drain: [1]", "shared: {nodeMonitorPeriod: [1s, 2s]}", "a: {b: {c: d}}",
		"shared: {nodeMonitorPeriod: 1s, nodeMonitorPeriod: 2s}", "- x", "x", "{}",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		var n yaml.Node
		if yaml.Unmarshal([]byte(doc), &n) != nil || len(n.Content) == 0 {
			return
		}
		sets, err := Read("f", n.Content[0], "", testSections())
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if !located.MatchString(line) {
					t.Fatalf("error without file:line: %q", line)
				}
			}
			return
		}
		if Check("f", sets, testSections()) != nil {
			return
		}
		fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
		for _, s := range testSections() {
			s.Register(fs)
		}
		if err := Set("f", sets, fs); err != nil {
			t.Fatalf("checked assignments failed to apply: %v", err)
		}
	})
}
