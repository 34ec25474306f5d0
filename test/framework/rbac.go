package framework

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/manifests"
)

// CredentialsEnv, set to "serviceaccount", makes StartNodeShepherd run the
// controllers as deploy/'s ServiceAccount instead of admin, bound to the
// roles of the controllers it runs and to nothing else (see
// ServiceAccountConfig); any request the API server forbids fails the test.
// Setting it for a whole run (go test) runs every test that way.
const CredentialsEnv = "NODESHEPHERD_TEST_CREDENTIALS"

// RunAsServiceAccount makes the rest of the test run its controllers as
// deploy/'s ServiceAccount (see CredentialsEnv): the RBAC check is made by
// the controllers' own scenarios, each run once, instead of by re-running
// them. The environment is the test's only until it ends, so such a test
// cannot be parallel (t.Setenv panics if it is).
func RunAsServiceAccount(t testing.TB) {
	t.Helper()
	t.Setenv(CredentialsEnv, "serviceaccount")
}

// Where deploy/base puts nodeshepherd; the overlays rename the
// ServiceAccount (nodeshepherd-drain...).
const (
	DeployNamespace      = manifests.DeployNamespace
	DeployServiceAccount = "nodeshepherd"
)

func asServiceAccount() bool { return os.Getenv(CredentialsEnv) == "serviceaccount" }

// LeaderElectionNamespace is where StartNodeShepherd's leader-election Lease
// lives: the given namespace, or deploy/'s when running as its ServiceAccount.
func LeaderElectionNamespace(def string) string {
	if asServiceAccount() {
		return DeployNamespace
	}
	return def
}

// RepoRoot is the module's directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	out, err := Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("finding the module root: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// WriteKubeconfig writes a kubeconfig for a bearer token on the server
// (whose CA is caData) to a file of the test's, for binaries and kubectl.
func WriteKubeconfig(t testing.TB, server string, caData []byte, token string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	f, err := os.CreateTemp(t.TempDir(), "*.kubeconfig")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := clientcmd.WriteToFile(*kc, f.Name()); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// Kubectl runs kubectl against the cluster of cfg (admin) and returns its output.
func Kubectl(t testing.TB, cfg *rest.Config, args ...string) string {
	t.Helper()
	path := WriteKubeconfig(t, cfg.Host, cfg.CAData, cfg.BearerToken)
	out, err := Command("kubectl", append([]string{"--kubeconfig", path}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ServiceAccountConfig applies deploy/base with the components of the given
// controllers (deploy/components/NAME), server-side as an operator would, as
// deploy/ and its overlays compose them, and returns a client configuration
// with a token of its ServiceAccount, which is then bound to those
// controllers' roles and the common ones only. Every 403 the API server
// answers on it fails the test at its end.
func ServiceAccountConfig(t testing.TB, admin *rest.Config, controllerNames []string) *rest.Config {
	t.Helper()
	Kubectl(t, admin, "apply", "--server-side", "--force-conflicts", "-k", DeployKustomization(t, controllerNames))
	client, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx := Context(t)
	// The controllers run in the test's process; the Deployment's own pods
	// would only be scheduled onto fake nodes and get in the scenarios' way.
	if _, err := client.AppsV1().Deployments(DeployNamespace).UpdateScale(ctx, "nodeshepherd",
		&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "nodeshepherd", Namespace: DeployNamespace}, Spec: autoscalingv1.ScaleSpec{Replicas: 0}},
		metav1.UpdateOptions{}); err != nil {
		t.Fatalf("scaling deploy/'s Deployment to 0: %v", err)
	}
	Eventually(t, time.Minute, "deploy/'s pods gone", func(ctx context.Context) (bool, string, error) {
		pods, err := client.CoreV1().Pods(DeployNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods", len(pods.Items)), nil
	})
	checkRegistryRoles(t, ctx, client, controllerNames)
	grantFakeCloud(t, ctx, client)
	tr, err := client.CoreV1().ServiceAccounts(DeployNamespace).CreateToken(ctx, DeployServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", DeployNamespace, DeployServiceAccount, err)
	}
	checkFlowSchema(t, admin, client, tr.Status.Token)
	forbidden := &forbiddenLog{}
	t.Cleanup(func() {
		if msgs := forbidden.list(); len(msgs) > 0 {
			t.Errorf("deploy/'s RBAC forbade %d requests of the controllers:\n%s", len(msgs), strings.Join(msgs, "\n"))
		}
	})
	t.Logf("running the controllers %v as system:serviceaccount:%s:%s (deploy/base and components %v applied with kubectl apply --server-side -k)",
		controllerNames, DeployNamespace, DeployServiceAccount, controllerNames)
	wrap := admin.WrapTransport // a test's own wrapper (e.g. recording requests) is kept
	return &rest.Config{
		Host:            admin.Host,
		BearerToken:     tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData},
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			rt = &forbiddenCatcher{next: rt, log: forbidden}
			if wrap != nil {
				rt = wrap(rt)
			}
			return rt
		},
	}
}

// DeployKustomization writes a kustomization of deploy/base with the
// components of the given controllers, as deploy/kustomization.yaml and the
// overlays are written, and returns its directory.
func DeployKustomization(t testing.TB, controllerNames []string) string {
	t.Helper()
	dir := t.TempDir()
	if err := manifests.WriteDeployKustomization(dir, filepath.Join(RepoRoot(t), "deploy"), controllerNames); err != nil {
		t.Fatal(err)
	}
	return dir
}

// checkRegistryRoles fails the test, naming the controller, when deploy/
// lacks the ClusterRole the controllers registry says a controller it runs
// needs, does not bind it to the ServiceAccount, or binds the ServiceAccount
// to the role of a controller it does not run: a new controller's role is
// then missed here, not as a 403 in the middle of a scenario, and least
// privilege is checked on the cluster, not only in the files.
func checkRegistryRoles(t testing.TB, ctx context.Context, client kubernetes.Interface, controllerNames []string) {
	t.Helper()
	bindings, err := client.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range controllers.Registry() {
		runs := slices.Contains(controllerNames, d.Name)
		if runs {
			if _, err := client.RbacV1().ClusterRoles().Get(ctx, d.ClusterRole, metav1.GetOptions{}); err != nil {
				t.Fatalf("controller %s needs ClusterRole %s (pkg/controller/%s/descriptor.go), which deploy/components/%s does not create: %v", d.Name, d.ClusterRole, d.Name, d.Name, err)
			}
		}
		bound := slices.ContainsFunc(bindings.Items, func(b rbacv1.ClusterRoleBinding) bool {
			return b.RoleRef.Kind == "ClusterRole" && b.RoleRef.Name == d.ClusterRole && slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
				return s.Kind == rbacv1.ServiceAccountKind && s.Name == DeployServiceAccount && s.Namespace == DeployNamespace
			})
		})
		switch {
		case runs && !bound:
			t.Fatalf("controller %s needs ClusterRole %s bound to ServiceAccount %s/%s; deploy/components/%s does not bind it", d.Name, d.ClusterRole, DeployNamespace, DeployServiceAccount, d.Name)
		case !runs && bound:
			t.Fatalf("ServiceAccount %s/%s runs %v but is bound to ClusterRole %s of controller %s: deploy/base must grant no controller anything", DeployNamespace, DeployServiceAccount, controllerNames, d.ClusterRole, d.Name)
		}
	}
}

// grantFakeCloud lets the ServiceAccount read the fake cloud's machine
// states and write its repair requests: the fake provider is a test double
// that keeps them in ConfigMaps; real providers are asked outside
// Kubernetes and deploy/ grants nothing for it.
func grantFakeCloud(t testing.TB, ctx context.Context, client kubernetes.Interface) {
	t.Helper()
	name := "nodeshepherd:test-fake-cloud"
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: fakecloud.ConfigMapNamespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{fakecloud.ConfigMapName}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{fakecloud.RequestsConfigMapName}, Verbs: []string{"get", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: fakecloud.ConfigMapNamespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: DeployServiceAccount, Namespace: DeployNamespace}}}
	if _, err := client.RbacV1().Roles(role.Namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().RoleBindings(binding.Namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

type forbiddenLog struct {
	mu   sync.Mutex
	msgs []string
}

func (f *forbiddenLog) add(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, s)
}

func (f *forbiddenLog) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.msgs...)
}

// forbiddenCatcher records every 403 with the request and the API server's reason.
type forbiddenCatcher struct {
	next http.RoundTripper
	log  *forbiddenLog
}

func (c *forbiddenCatcher) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusForbidden {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		resp.Body = io.NopCloser(strings.NewReader(string(body)))
		c.log.add(fmt.Sprintf("  %s %s: %s", req.Method, req.URL.Path, strings.TrimSpace(string(body))))
	}
	return resp, err
}

// checkFlowSchema proves deploy/'s API Priority and Fairness objects take
// effect: a request with the ServiceAccount's token is classified into the
// nodeshepherd priority level (the API server names it in a response header).
func checkFlowSchema(t testing.TB, admin *rest.Config, client kubernetes.Interface, token string) {
	t.Helper()
	plc, err := client.FlowcontrolV1().PriorityLevelConfigurations().Get(Context(t), "nodeshepherd", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("deploy/'s PriorityLevelConfiguration: %v", err)
	}
	var level string
	cfg := &rest.Config{Host: admin.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData},
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(req *http.Request) (*http.Response, error) {
				resp, err := rt.RoundTrip(req)
				if err == nil {
					level = resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID")
				}
				return resp, err
			})
		}}
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The API server loads new FlowSchemas asynchronously.
	Eventually(t, 30*time.Second, "the ServiceAccount's requests in priority level nodeshepherd", func(ctx context.Context) (bool, string, error) {
		if _, err := sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			return false, "", err
		}
		return level == string(plc.UID), "priority level UID " + level, nil
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
