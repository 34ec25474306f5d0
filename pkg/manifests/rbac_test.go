package manifests

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	runcmd "github.com/nodeshepherd/nodeshepherd/pkg/cmd/run"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
)

// TestDeployRolesHaveNoWildcards renders deploy/, each overlay and the base
// with every controller's component, and checks every Role and ClusterRole
// rule names its API groups, resources and verbs, and that each controller's
// component creates the ClusterRole the registry names.
func TestDeployRolesHaveNoWildcards(t *testing.T) {
	root := repoRoot(t)
	all := deployKustomization(t, controllers.Names)
	dirs := []string{all, filepath.Join(root, "deploy")}
	overlays, _ := filepath.Glob(filepath.Join(root, "deploy", "overlays", "*"))
	dirs = append(dirs, overlays...)
	for _, dir := range dirs {
		out, err := exec.Command("kubectl", "kustomize", dir).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
		}
		dec := yaml.NewDecoder(bytes.NewReader(out))
		roles := 0
		clusterRoles := map[string]bool{}
		for {
			var doc struct {
				Kind     string                `yaml:"kind"`
				Metadata struct{ Name string } `yaml:"metadata"`
				Rules    []struct {
					APIGroups       []string `yaml:"apiGroups"`
					Resources       []string `yaml:"resources"`
					Verbs           []string `yaml:"verbs"`
					ResourceNames   []string `yaml:"resourceNames"`
					NonResourceURLs []string `yaml:"nonResourceURLs"`
				} `yaml:"rules"`
			}
			if err := dec.Decode(&doc); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatal(err)
			}
			if doc.Kind != "ClusterRole" && doc.Kind != "Role" {
				continue
			}
			roles++
			if doc.Kind == "ClusterRole" {
				clusterRoles[doc.Metadata.Name] = true
			}
			for i, r := range doc.Rules {
				for field, values := range map[string][]string{"apiGroups": r.APIGroups, "resources": r.Resources, "verbs": r.Verbs, "resourceNames": r.ResourceNames, "nonResourceURLs": r.NonResourceURLs} {
					if slices.ContainsFunc(values, func(v string) bool { return strings.Contains(v, "*") }) {
						t.Errorf("%s: %s %s rule %d has a wildcard in %s: %v", filepath.Base(dir), doc.Kind, doc.Metadata.Name, i, field, values)
					}
				}
				if len(r.Verbs) == 0 || (len(r.Resources) == 0 && len(r.NonResourceURLs) == 0) {
					t.Errorf("%s: %s %s rule %d names no verbs or resources", filepath.Base(dir), doc.Kind, doc.Metadata.Name, i)
				}
			}
		}
		if roles == 0 {
			t.Errorf("%s renders no roles", dir)
		}
		if dir != all {
			continue // deploy/ and the overlays have the roles of the controllers they run
		}
		for _, d := range controllers.Registry() {
			if !clusterRoles[d.ClusterRole] {
				t.Errorf("deploy/components/%s renders no ClusterRole %s, which the registry says controller %s needs", d.Name, d.ClusterRole, d.Name)
			}
		}
	}
}

// TestDeployServiceAccountsLeastPrivilege renders deploy/ and each overlay
// and checks, for each, that its Deployment runs as a ServiceAccount of its
// own (no two share one, so one's leftover bindings never grant another
// anything), bound to the ClusterRoles of exactly the controllers its
// configuration runs (read as `run --config` reads it) and to
// system:auth-delegator for its HTTPS server, and that its probes use HTTPS.
func TestDeployServiceAccountsLeastPrivilege(t *testing.T) {
	root := repoRoot(t)
	dirs := []string{filepath.Join(root, "deploy")}
	overlays, _ := filepath.Glob(filepath.Join(root, "deploy", "overlays", "*"))
	dirs = append(dirs, overlays...)
	owner := map[string]string{} // ServiceAccount: the directory deploying it
	for _, dir := range dirs {
		name, _ := filepath.Rel(root, dir)
		out, err := exec.Command("kubectl", "kustomize", dir).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
		}
		type subject struct{ Kind, Name, Namespace string }
		type probe struct {
			HTTPGet struct{ Scheme, Port, Path string } `yaml:"httpGet"`
		}
		var sa, configYAML string
		var probes []probe
		bound := map[string]bool{} // ClusterRoles bound to sa, once sa is known
		var bindings []struct {
			role     string
			subjects []subject
		}
		dec := yaml.NewDecoder(bytes.NewReader(out))
		for {
			var doc struct {
				Kind     string
				Metadata struct{ Name string }
				Data     map[string]string
				RoleRef  struct{ Kind, Name string } `yaml:"roleRef"`
				Subjects []subject
				Spec     struct {
					Template struct {
						Spec struct {
							ServiceAccountName string `yaml:"serviceAccountName"`
							Containers         []struct {
								LivenessProbe  probe `yaml:"livenessProbe"`
								ReadinessProbe probe `yaml:"readinessProbe"`
							}
						}
					}
				}
			}
			if err := dec.Decode(&doc); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatal(err)
			}
			switch doc.Kind {
			case "Deployment":
				sa = doc.Spec.Template.Spec.ServiceAccountName
				for _, c := range doc.Spec.Template.Spec.Containers {
					probes = append(probes, c.LivenessProbe, c.ReadinessProbe)
				}
			case "ConfigMap":
				configYAML = doc.Data["config.yaml"]
			case "ClusterRoleBinding":
				if doc.RoleRef.Kind == "ClusterRole" {
					bindings = append(bindings, struct {
						role     string
						subjects []subject
					}{doc.RoleRef.Name, doc.Subjects})
				}
			}
		}
		if sa == "" || configYAML == "" {
			t.Fatalf("%s: no Deployment with a ServiceAccount, or no config.yaml ConfigMap", name)
		}
		if other, ok := owner[sa]; ok {
			t.Errorf("%s and %s both run as ServiceAccount %s: each deployment needs its own (rename it in the overlay)", other, name, sa)
		}
		owner[sa] = name
		for _, b := range bindings {
			if slices.Contains(b.subjects, subject{"ServiceAccount", sa, DeployNamespace}) {
				bound[b.role] = true
			}
		}
		conf := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(conf, []byte(configYAML), 0o644); err != nil {
			t.Fatal(err)
		}
		runs, err := runcmd.SelectedControllers(conf)
		if err != nil {
			t.Fatalf("%s: its configuration: %v", name, err)
		}
		for _, d := range controllers.Registry() {
			switch want := slices.Contains(runs, d.Name); {
			case want && !bound[d.ClusterRole]:
				t.Errorf("%s runs %s but does not bind ClusterRole %s to ServiceAccount %s: add components/%s", name, d.Name, d.ClusterRole, sa, d.Name)
			case !want && bound[d.ClusterRole]:
				t.Errorf("%s does not run %s but binds its ClusterRole %s to ServiceAccount %s", name, d.Name, d.ClusterRole, sa)
			}
		}
		if !bound["system:auth-delegator"] {
			t.Errorf("%s: ServiceAccount %s is not bound to system:auth-delegator (TokenReview and SubjectAccessReview of the HTTPS server)", name, sa)
		}
		for _, p := range probes {
			if p.HTTPGet.Scheme != "HTTPS" {
				t.Errorf("%s: probe of %s is %q, not HTTPS on the secure port", name, p.HTTPGet.Path, p.HTTPGet.Scheme)
			}
		}
		t.Logf("%s: ServiceAccount %s runs %v", name, sa, runs)
	}
}
