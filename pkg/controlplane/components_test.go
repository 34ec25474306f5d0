package controlplane

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func has(args []string, want string) bool {
	for _, a := range args {
		if a == want {
			return true
		}
	}
	return false
}

func TestComponentArgs(t *testing.T) {
	l := layout{Dir: "/d", EtcdClientPort: 1, EtcdPeerPort: 2, APIServerPort: 3, KCMPort: 4, SchedulerPort: 5, PKI: &pki{SAPrivate: "/d/sa.key"}}
	for _, want := range []string{"--authorization-mode=RBAC", "--etcd-servers=http://127.0.0.1:1", "--secure-port=3", "--service-account-signing-key-file=/d/sa.key"} {
		if !has(apiServerArgs(l), want) {
			t.Errorf("kube-apiserver args lack %s", want)
		}
	}
	for _, a := range apiServerArgs(l) {
		// Default admission plugins (DefaultTolerationSeconds, Priority, ...) must stay on.
		if strings.HasPrefix(a, "--disable-admission-plugins") || strings.HasPrefix(a, "--enable-admission-plugins") {
			t.Errorf("admission plugins changed: %s", a)
		}
	}
	kcm := controllerManagerArgs(l, DefaultControllers)
	for _, want := range []string{"--controllers=*,-nodelifecycle,-taint-eviction-controller,-nodeipam", "--secure-port=4", "--use-service-account-credentials=true", "--kubeconfig=/d/controller-manager.kubeconfig"} {
		if !has(kcm, want) {
			t.Errorf("kube-controller-manager args lack %s", want)
		}
	}
	if !has(schedulerArgs(l), "--secure-port=5") || !has(etcdArgs(l), "--listen-client-urls=http://127.0.0.1:1") {
		t.Error("scheduler or etcd ports wrong")
	}
}

func TestTokenLine(t *testing.T) {
	if got := tokenLine("t", identity{user: "u", groups: "system:masters"}, 7); got != "t,u,7,\"system:masters\"\n" {
		t.Errorf("tokenLine = %q", got)
	}
	if got := tokenLine("t", identity{user: "u"}, 7); got != "t,u,7\n" {
		t.Errorf("tokenLine = %q", got)
	}
}

func TestCheckBinariesNamesMakeTarget(t *testing.T) {
	err := CheckBinaries(t.TempDir(), Etcd, APIServer)
	if !errors.Is(err, ErrMissingBinaries) || !strings.Contains(err.Error(), "make controlplane") || !strings.Contains(err.Error(), "etcd, kube-apiserver") {
		t.Errorf("CheckBinaries = %v", err)
	}
}

func TestFreePortsDistinct(t *testing.T) {
	ports, err := freePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d returned twice", p)
		}
		seen[p] = true
		// Outgoing connections take local ports from the ephemeral range:
		// a listening port chosen there could be taken before it is bound.
		if p < portsFloor || p >= ephemeralLow() {
			t.Errorf("port %d outside [%d, %d)", p, portsFloor, ephemeralLow())
		}
	}
}

// The start lock excludes a second holder until the first lets go. On a
// file of its own: the machine-wide one is also taken by every control
// plane that other test processes start meanwhile, and the second holder
// here would wait for them all.
func TestStartPortLockIsExclusive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ports.lock")
	unlock, err := lockFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan func(), 1)
	go func() {
		u, err := lockFile(path)
		if err != nil {
			t.Error(err)
			u = func() {}
		}
		got <- u
	}()
	select {
	case <-got:
		t.Fatal("a second holder got the lock while the first held it")
	case <-time.After(200 * time.Millisecond):
	}
	unlock()
	select {
	case u := <-got:
		u()
	case <-time.After(10 * time.Second):
		t.Fatal("the second holder never got the lock")
	}
}
