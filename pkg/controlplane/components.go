package controlplane

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultControllers is kube-controller-manager's controller list when it runs
// next to nodeshepherd: every default controller except those nodeshepherd
// replaces.
const DefaultControllers = "*,-nodelifecycle,-taint-eviction-controller,-nodeipam"

// Binary names, as `make controlplane` writes them into bin/.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
)

// ServiceClusterIPRange is the service range of every local control plane.
const ServiceClusterIPRange = "10.96.0.0/16"

// layout is where one control plane keeps its files and which ports it uses.
// The component builders below are pure functions of it, so the arguments can
// be tested and printed without starting anything.
type layout struct {
	Dir                                   string
	EtcdClientPort, EtcdPeerPort          int
	APIServerPort, KCMPort, SchedulerPort int
	PKI                                   *pki
}

func (l layout) path(name string) string { return filepath.Join(l.Dir, name) }

func (l layout) etcdURL() string { return "http://127.0.0.1:" + strconv.Itoa(l.EtcdClientPort) }

// Server is the URL of the kube-apiserver.
func (l layout) Server() string { return "https://127.0.0.1:" + strconv.Itoa(l.APIServerPort) }

func etcdArgs(l layout) []string {
	peer := "http://127.0.0.1:" + strconv.Itoa(l.EtcdPeerPort)
	return []string{
		"--name=default",
		"--data-dir=" + l.path("etcd"),
		"--listen-client-urls=" + l.etcdURL(),
		"--advertise-client-urls=" + l.etcdURL(),
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=default=" + peer,
		// A throw-away local cluster: durability is not worth the fsync cost,
		// which dominates etcd's CPU at thousands of lease renewals a second.
		"--unsafe-no-fsync=true",
		"--quota-backend-bytes=" + strconv.Itoa(8<<30),
		"--log-level=warn",
	}
}

func apiServerArgs(l layout) []string {
	return []string{
		"--etcd-servers=" + l.etcdURL(),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(l.APIServerPort),
		"--tls-cert-file=" + l.PKI.ServingCert,
		"--tls-private-key-file=" + l.PKI.ServingKey,
		"--client-ca-file=" + l.PKI.CACert,
		"--token-auth-file=" + l.path("tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + l.PKI.SAPublic,
		"--service-account-signing-key-file=" + l.PKI.SAPrivate,
		"--service-cluster-ip-range=" + ServiceClusterIPRange,
		"--allow-privileged=true",
		// The kubernetes Service would point at 127.0.0.1, which Endpoints
		// validation rejects; nothing in a local control plane needs it.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}
}

func controllerManagerArgs(l layout, controllers string) []string {
	kc := l.path(kubeconfigKCM)
	return []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(l.KCMPort),
		"--tls-cert-file=" + l.PKI.ServingCert,
		"--tls-private-key-file=" + l.PKI.ServingKey,
		"--controllers=" + controllers,
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + l.PKI.SAPrivate,
		"--root-ca-file=" + l.PKI.CACert,
		"--cluster-signing-cert-file=" + l.PKI.CACert,
		"--cluster-signing-key-file=" + l.PKI.CAKey,
		"--profiling=false",
	}
}

func schedulerArgs(l layout) []string {
	kc := l.path(kubeconfigScheduler)
	return []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(l.SchedulerPort),
		"--tls-cert-file=" + l.PKI.ServingCert,
		"--tls-private-key-file=" + l.PKI.ServingKey,
		"--leader-elect=false",
		"--profiling=false",
	}
}

// withoutIgnoredByConfig drops the flags kube-scheduler ignores when it has
// a configuration file (it says so in --help); the file carries them.
func withoutIgnoredByConfig(args []string) []string {
	var out []string
	for _, a := range args {
		if !strings.HasPrefix(a, "--kubeconfig=") && !strings.HasPrefix(a, "--profiling=") {
			out = append(out, a)
		}
	}
	return out
}

// Kubeconfig file names inside the control plane's directory.
const (
	kubeconfigAdmin     = "admin.kubeconfig"
	kubeconfigKCM       = "controller-manager.kubeconfig"
	kubeconfigScheduler = "scheduler.kubeconfig"
)

// identity is a static-token user of the local control plane.
type identity struct {
	file, user string
	groups     string
}

// identities are the users in the static token file. The controller manager
// and scheduler use the identities that the apiserver's bootstrap RBAC policy
// already grants their roles, so RBAC is real for them.
var identities = []identity{
	{file: kubeconfigAdmin, user: "nodeshepherd-admin", groups: "system:masters"},
	{file: kubeconfigKCM, user: "system:kube-controller-manager"},
	{file: kubeconfigScheduler, user: "system:kube-scheduler"},
}

func tokenLine(token string, id identity, uid int) string {
	if id.groups == "" {
		return fmt.Sprintf("%s,%s,%d\n", token, id.user, uid)
	}
	return fmt.Sprintf("%s,%s,%d,\"%s\"\n", token, id.user, uid, id.groups)
}
