package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// TestSecureServing runs `nodeshepherd run` as deploy/'s ServiceAccount
// (deploy/base applied with kubectl, so its system:auth-delegator binding
// and metrics-reader role are what is tested) with the serving defaults
// but the port, and checks the HTTPS server as kube-controller-manager's
// behaves: the health paths answer anyone; /metrics needs a token of a
// ServiceAccount that may get it (deploy/'s binding for Prometheus's), a
// token of another is refused with 403, no token with 403 (anonymous), a
// bad token with 401; plain HTTP gets no answer from it, and no plain-HTTP
// server runs unless asked for (on loopback only: TestPlainHTTPOnlyOnLoopback).
func TestSecureServing(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{})
	admin := cp.RESTConfig()
	client := framework.Client(t, cp)
	ctx := framework.Context(t)
	saCfg := framework.ServiceAccountConfig(t, admin, []string{"nodelifecycle"})
	kubeconfig := writeKubeconfig(t, saCfg)

	// deploy/base binds nodeshepherd:metrics-reader to kube-prometheus's
	// ServiceAccount; another in the same namespace gets nothing.
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "monitoring"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(name string) string {
		t.Helper()
		if _, err := client.CoreV1().ServiceAccounts("monitoring").Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := client.CoreV1().ServiceAccounts("monitoring").CreateToken(ctx, name,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	prometheus, other := token("prometheus-k8s"), token("not-a-reader")

	cmd, port := startListening(t, func(port int) []string {
		return []string{"run", "--kubeconfig", kubeconfig, "--controllers=nodelifecycle",
			"--leader-elect-resource-namespace=" + framework.DeployNamespace, "--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port)}
	})
	ns := &framework.NodeShepherd{Addr: fmt.Sprintf("127.0.0.1:%d", port), Secure: true}

	get := func(path, token string) (int, string) {
		t.Helper()
		n := *ns
		n.Token = token
		resp, err := n.Get(ctx, path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
			t.Fatalf("GET %s: not TLS", path)
		}
		return resp.StatusCode, string(body)
	}
	// The state asserted below is the steady one: this process leads, its
	// controllers run, and /readyz says ready (docs/operations.md: a standby
	// is ready too, and stays ready while it takes over).
	framework.Eventually(t, 2*time.Minute, "the leader running its controllers, /readyz 200 on HTTPS without a token", func(ctx context.Context) (bool, string, error) {
		n := *ns
		n.Token = prometheus
		resp, err := n.Get(ctx, "/metrics")
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK { // Metric fails the test on that
			return false, "/metrics " + resp.Status, nil
		}
		if v := n.Metric(t, "nodeshepherd_leader", nil); v != 1 {
			return false, fmt.Sprintf("nodeshepherd_leader %v", v), nil
		}
		if !strings.Contains(logOf(cmd), "Controllers running") {
			return false, "leading; controllers not running yet", nil
		}
		n.Token = ""
		resp, err = n.Get(ctx, "/readyz")
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, "/readyz " + resp.Status, nil
	})

	for _, tc := range []struct {
		path, token, who string
		want             int
	}{
		{"/healthz", "", "anonymous", 200},
		{"/livez", "", "anonymous", 200},
		{"/readyz", other, "a ServiceAccount without the metrics role", 200},
		{"/metrics", "", "anonymous", 403},
		{"/metrics", "not-a-token", "a bad token", 401},
		{"/healthz", "not-a-token", "a bad token", 401},
		{"/metrics", other, "a ServiceAccount without the metrics role", 403},
		{"/metrics", prometheus, "Prometheus's ServiceAccount (nodeshepherd:metrics-reader)", 200},
	} {
		code, body := get(tc.path, tc.token)
		if code != tc.want {
			t.Errorf("GET %s as %s: %d %q, want %d", tc.path, tc.who, code, strings.TrimSpace(body), tc.want)
		}
		if tc.path == "/metrics" && code == 200 && !strings.Contains(body, "nodeshepherd_leader") {
			t.Errorf("GET /metrics as %s: no nodeshepherd_leader in the answer", tc.who)
		}
	}
	if code, body := get("/metrics", other); !strings.Contains(body, `cannot get path "/metrics"`) {
		t.Errorf("the 403 does not say what was refused: %d %q", code, body)
	}

	// The certificate is the self-signed one made in memory.
	conn, err := tls.Dial("tcp", ns.Addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	cert := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	if cert.Issuer.String() != cert.Subject.String() || cert.VerifyHostname("127.0.0.1") != nil {
		t.Errorf("served certificate: issuer %q, subject %q, IPs %v; want self-signed for 127.0.0.1", cert.Issuer, cert.Subject, cert.IPAddresses)
	}

	// The secure port is all it listens on: no plain-HTTP server by default.
	if got := listeningPorts(t, cmd.Process.Pid); !slices.Equal(got, []int{port}) {
		t.Errorf("the process listens on TCP ports %v, want only the secure port %d", got, port)
	}
	// Plain HTTP on the secure port is not served.
	if resp, err := http.Get("http://" + ns.Addr + "/healthz"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP on the secure port answered %s %q", resp.Status, body)
		}
	}
}

// TestPlainHTTPOnlyOnLoopback: plain HTTP, which has no authentication, is
// served only when asked for with a loopback --metrics-bind-address; any
// other address is a usage error that points to --secure-port.
func TestPlainHTTPOnlyOnLoopback(t *testing.T) {
	bin := framework.Binary(t)
	for _, addr := range []string{":8080", "0.0.0.0:8080", "10.0.0.1:8080"} {
		code, stderr := run(t, bin, "run", "--metrics-bind-address="+addr)
		if code != 2 || !strings.Contains(stderr, "loopback") || !strings.Contains(stderr, "--secure-port") {
			t.Errorf("--metrics-bind-address=%s: exit %d, %q; want 2 and an error naming loopback and --secure-port", addr, code, stderr)
		}
	}
	for _, args := range [][]string{{"--tls-cert-file=/etc/hostname"}, {"--tls-cert-file=/nonexistent.crt", "--tls-private-key-file=/nonexistent.key"}, {"--bind-address=eth0"}} {
		code, stderr := run(t, bin, append([]string{"run"}, args...)...)
		if code != 2 {
			t.Errorf("%v: exit %d (%q), want 2", args, code, stderr)
		}
	}

	cp := framework.StartControlPlane(t, controlplane.Config{})
	_, port := startListening(t, func(port int) []string {
		return []string{"run", "--kubeconfig", cp.KubeconfigPath(), "--controllers=nodelifecycle", "--leader-elect=false",
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", port)}
	})
	ns := &framework.NodeShepherd{Addr: fmt.Sprintf("127.0.0.1:%d", port)}
	framework.Eventually(t, 60*time.Second, "plain-HTTP /readyz 200 on loopback", func(ctx context.Context) (bool, string, error) {
		resp, err := ns.Get(ctx, "/readyz")
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
	if v := ns.Metric(t, "nodeshepherd_leader", nil); v != 1 {
		t.Errorf("nodeshepherd_leader %v on plain HTTP, want 1", v)
	}
}

// listeningPorts returns the TCP ports process pid listens on: its socket
// inodes (/proc/PID/fd) found in LISTEN state in /proc/net/tcp and tcp6.
func listeningPorts(t *testing.T, pid int) []int {
	t.Helper()
	ports, err := listening(pid)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// listening is listeningPorts, with an error once the process is gone.
func listening(pid int) ([]int, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	var ports []int
	for _, table := range []string{"tcp", "tcp6"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] { // 0A: LISTEN
				continue
			}
			_, portHex, _ := strings.Cut(f[1], ":")
			port, err := strconv.ParseInt(portHex, 16, 32)
			if err != nil {
				return nil, err
			}
			ports = append(ports, int(port))
		}
	}
	slices.Sort(ports)
	return ports, nil
}

// writeKubeconfig writes cfg (a bearer token and the cluster's CA) to a
// kubeconfig file for the binary.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	return framework.WriteKubeconfig(t, cfg.Host, cfg.CAData, cfg.BearerToken)
}
