// Package hollownode runs kubemark's hollow nodes (the real kubelet code with
// a fake container runtime, built by `make controlplane` as bin/kubemark)
// against any API server, one process per node, each behind its own Proxy
// so that a node can be partitioned the way a network partition looks to
// the kubelet (issue 47). It is the real-kubelet counterpart of package
// fakenode: the same node names, zones and labels, and the faults that
// a process and a proxy can give (partition, heal, kubelet stop and start,
// and a machine's power cycle, with a boot ID that nodeshepherd's kubemark
// build reports: --boot-id, hack/controlplane/kubemark), and the fake cloud
// provider's repair requests (reboot, replace, power-off: repair.go).
package hollownode

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"

	"github.com/nodeshepherd/nodeshepherd/pkg/childproc"
	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
)

// Binary is the hollow node's file name in the control plane's bin
// directory.
const Binary = "kubemark"

// Defaults.
const (
	DefaultNamePrefix = "hollow-node-"
	DefaultRegion     = "region-1"
	DefaultMaxPods    = 110
)

// Config describes a fleet of hollow nodes.
type Config struct {
	// Binary is the kubemark executable.
	Binary string
	// Server is how to reach the API server (host, TLS, credentials):
	// each node gets a kubeconfig with these credentials whose server is
	// its own Proxy.
	Server *rest.Config
	Nodes  int
	// NamePrefix: names are PREFIX0000, PREFIX0001, ... as fakenode's.
	NamePrefix string
	// Zones are spread round robin (topology.kubernetes.io/zone).
	Zones  []string
	Region string
	Labels map[string]string
	// MaxPods is each kubelet's --max-pods.
	MaxPods int
	// Dir holds one directory per node: its kubeconfig, its log and the
	// kubelet's root directory.
	Dir string
	// Verbosity is the kubelets' -v.
	Verbosity int
	// RebootDowntime is how long a machine the fake cloud provider reboots
	// is off; ReplaceDowntime how long a replaced machine's Node is gone
	// before the new machine starts and registers it (package
	// cloudprovider/fake; their defaults when 0). IgnorePowerOff: a
	// power-off request is marked done and the machine runs on.
	RebootDowntime, ReplaceDowntime time.Duration
	IgnorePowerOff                  bool
	// Specs, when set, names each node and its zone (Nodes, NamePrefix
	// and Zones are then not used): simulate gives hollow nodes the names
	// and zones its fake nodes would have.
	Specs []NodeSpec
}

// NodeSpec is one hollow node's name and zone.
type NodeSpec struct {
	Name, Zone string
}

func (c *Config) complete() {
	if len(c.Specs) > 0 {
		c.Nodes = len(c.Specs)
	}
	if c.NamePrefix == "" {
		c.NamePrefix = DefaultNamePrefix
	}
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if c.MaxPods == 0 {
		c.MaxPods = DefaultMaxPods
	}
	if c.RebootDowntime == 0 {
		c.RebootDowntime = fakecloud.DefaultRebootDowntime
	}
	if c.ReplaceDowntime == 0 {
		c.ReplaceDowntime = fakecloud.DefaultReplaceDowntime
	}
}

// Validate says what is wrong, naming the field.
func (c *Config) Validate() error {
	var errs []error
	if c.Binary == "" {
		errs = append(errs, errors.New("no kubemark binary: run 'make controlplane', which builds bin/kubemark"))
	} else if _, err := os.Stat(c.Binary); err != nil {
		errs = append(errs, fmt.Errorf("kubemark binary: %w (run 'make controlplane', which builds bin/kubemark)", err))
	}
	if c.Server == nil || c.Server.Host == "" {
		errs = append(errs, errors.New("no API server to reach"))
	}
	if c.Nodes < 1 {
		errs = append(errs, fmt.Errorf("nodes must be at least 1, got %d", c.Nodes))
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("no directory for the nodes' kubeconfigs and logs"))
	}
	if c.MaxPods < 1 {
		errs = append(errs, fmt.Errorf("max pods must be at least 1, got %d", c.MaxPods))
	}
	if c.RebootDowntime < 0 || c.ReplaceDowntime < 0 {
		errs = append(errs, fmt.Errorf("reboot and replace downtimes must not be negative, got %v and %v", c.RebootDowntime, c.ReplaceDowntime))
	}
	seen := map[string]bool{}
	for i, sp := range c.Specs {
		switch {
		case sp.Name == "":
			errs = append(errs, fmt.Errorf("node %d: no name", i))
		case seen[sp.Name]:
			errs = append(errs, fmt.Errorf("node %s is named twice", sp.Name))
		}
		seen[sp.Name] = true
	}
	return errors.Join(errs...)
}

// spec is node i's name and zone.
func (c *Config) spec(i int) NodeSpec {
	if len(c.Specs) > 0 {
		return c.Specs[i]
	}
	sp := NodeSpec{Name: c.nodeName(i)}
	if len(c.Zones) > 0 {
		sp.Zone = c.Zones[i%len(c.Zones)]
	}
	return sp
}

func (c *Config) nodeName(i int) string {
	width := max(4, len(strconv.Itoa(c.Nodes-1)))
	return fmt.Sprintf("%s%0*d", c.NamePrefix, width, i)
}

// node is one hollow node: its proxy and its kubelet process.
type node struct {
	name, zone string
	dir        string
	binary     string
	proxy      *Proxy
	args       []string
	mu         sync.Mutex
	proc       *process // nil while the kubelet is stopped
	m          machine
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Fleet is a running set of hollow nodes.
type Fleet struct {
	cfg    Config
	client kubernetes.Interface
	nodes  map[string]*node
	names  []string

	mu      sync.Mutex
	stopped bool // after Stop no kubelet starts again

	// The fake cloud's repair requests (repair.go), carried out from Start
	// to Stop; rebooting are the reboots waiting for their downtime.
	cancelRepairs, stopRepairs func()
	rebooting                  sync.WaitGroup
}

// Start starts every node (its proxy, its kubeconfig, its kubelet) and
// waits until each has registered its Node, reports Ready and has its
// Lease (the kubelet creates it some 10 s after registering), or until
// timeout; progress, if not nil, is called as nodes become Ready.
func Start(ctx context.Context, cfg Config, timeout time.Duration, progress func(ready, total int)) (*Fleet, error) {
	cfg.complete()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg.Server)
	if err != nil {
		return nil, err
	}
	target, err := hostPort(cfg.Server.Host)
	if err != nil {
		return nil, err
	}
	f := &Fleet{cfg: cfg, client: client, nodes: map[string]*node{}}
	for i := 0; i < cfg.Nodes; i++ {
		sp := cfg.spec(i)
		n := &node{name: sp.Name, zone: sp.Zone, dir: filepath.Join(cfg.Dir, sp.Name), m: newMachine()}
		f.nodes[n.name] = n
		f.names = append(f.names, n.name)
		if err := f.prepare(n, target); err != nil {
			f.Stop()
			return nil, err
		}
		if err := n.start(); err != nil {
			f.Stop()
			return nil, err
		}
	}
	sort.Strings(f.names)
	if err := f.waitReady(ctx, f.names, timeout, progress); err != nil {
		f.Stop()
		return nil, err
	}
	if err := f.startRepairs(ctx, timeout); err != nil {
		f.Stop()
		return nil, err
	}
	return f, nil
}

// hostPort is the host:port of an API server URL (or host).
func hostPort(host string) (string, error) {
	u, err := url.Parse(host)
	if err != nil || u.Host == "" {
		u, err = url.Parse("https://" + host)
		if err != nil {
			return "", fmt.Errorf("API server address %q: %w", host, err)
		}
	}
	if u.Port() != "" {
		return u.Host, nil
	}
	if u.Scheme == "http" {
		return net.JoinHostPort(u.Hostname(), "80"), nil
	}
	return net.JoinHostPort(u.Hostname(), "443"), nil
}

// prepare starts the node's proxy and writes its kubeconfig and flags.
func (f *Fleet) prepare(n *node, target string) error {
	if err := os.MkdirAll(filepath.Join(n.dir, "tmp"), 0o755); err != nil {
		return err
	}
	p, err := NewProxy(target)
	if err != nil {
		return fmt.Errorf("node %s: proxy: %w", n.name, err)
	}
	n.proxy, n.binary = p, f.cfg.Binary
	kc := filepath.Join(n.dir, "kubeconfig")
	if err := writeKubeconfig(f.cfg.Server, p.Addr(), kc); err != nil {
		return fmt.Errorf("node %s: %w", n.name, err)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	labels := map[string]string{"topology.kubernetes.io/region": f.cfg.Region}
	if n.zone != "" {
		labels["topology.kubernetes.io/zone"] = n.zone
	}
	maps.Copy(labels, f.cfg.Labels)
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		pairs = append(pairs, k+"="+labels[k])
	}
	n.args = []string{
		"--morph=kubelet",
		"--name=" + n.name,
		"--kubeconfig=" + kc,
		"--kubelet-port=" + strconv.Itoa(port),
		"--kubelet-read-only-port=0",
		// The fake runtime's own image service: no containerd here.
		"--use-host-image-service=false",
		"--max-pods=" + strconv.Itoa(f.cfg.MaxPods),
		"--node-labels=" + strings.Join(pairs, ","),
		"--v=" + strconv.Itoa(f.cfg.Verbosity),
	}
	return nil
}

// writeKubeconfig writes a kubeconfig with srv's credentials whose server
// is the node's proxy; the TLS server name stays the API server's, so the
// kubelet verifies the API server's certificate through the proxy.
func writeKubeconfig(srv *rest.Config, proxyAddr, path string) error {
	u, err := url.Parse(srv.Host)
	if err != nil || u.Host == "" {
		u = &url.URL{Scheme: "https", Host: srv.Host}
	}
	cluster := &clientcmdapi.Cluster{Server: u.Scheme + "://" + proxyAddr, TLSServerName: srv.TLSClientConfig.ServerName, InsecureSkipTLSVerify: srv.Insecure,
		CertificateAuthorityData: srv.CAData, CertificateAuthority: srv.CAFile}
	if cluster.TLSServerName == "" {
		cluster.TLSServerName = u.Hostname()
	}
	auth := &clientcmdapi.AuthInfo{Token: srv.BearerToken, TokenFile: srv.BearerTokenFile, ClientCertificateData: srv.CertData, ClientKeyData: srv.KeyData,
		ClientCertificate: srv.CertFile, ClientKey: srv.KeyFile, Username: srv.Username, Password: srv.Password}
	c := clientcmdapi.NewConfig()
	c.Clusters["hollow"] = cluster
	c.AuthInfos["hollow"] = auth
	c.Contexts["hollow"] = &clientcmdapi.Context{Cluster: "hollow", AuthInfo: "hollow"}
	c.CurrentContext = "hollow"
	return clientcmd.WriteToFile(*c, path)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs the node's kubelet process (appending to its log) with the
// machine's boot ID; nothing while it runs or while the machine is off.
func (n *node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil || !n.m.on() {
		return nil
	}
	log, err := os.OpenFile(filepath.Join(n.dir, "kubelet.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(n.binary, append(slices.Clone(n.args), "--boot-id="+n.m.boot)...)
	cmd.Stdout, cmd.Stderr = log, log
	// The kubelet's root and the fake runtime's socket go under the node's
	// own directory.
	cmd.Env = append(os.Environ(), "TMPDIR="+filepath.Join(n.dir, "tmp"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	childproc.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("node %s: starting kubemark: %w", n.name, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	n.proc = p
	return nil
}

// stop ends the node's kubelet (SIGTERM, SIGKILL after grace).
func (n *node) stop(grace time.Duration) {
	n.mu.Lock()
	p := n.proc
	n.proc = nil
	n.mu.Unlock()
	if p == nil {
		return
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}

// kill ends the process group at once (SIGKILL) and waits for it; nothing
// for a nil process.
func (p *process) kill() {
	if p == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Names are the nodes' names, sorted.
func (f *Fleet) Names() []string { return slices.Clone(f.names) }

// Zone is a node's zone.
func (f *Fleet) Zone(name string) string {
	if n := f.nodes[name]; n != nil {
		return n.zone
	}
	return ""
}

func (f *Fleet) resolve(names []string) ([]*node, error) {
	var out []*node
	var unknown []string
	for _, name := range names {
		n := f.nodes[name]
		if n == nil {
			unknown = append(unknown, name)
			continue
		}
		out = append(out, n)
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("no hollow node named %s (the nodes are %s..%s)", strings.Join(unknown, ", "), f.names[0], f.names[len(f.names)-1])
	}
	return out, nil
}

// Partition cuts the nodes off the API server: their proxies stop
// forwarding, both ways, and close nothing.
func (f *Fleet) Partition(names ...string) error {
	return f.setPartitioned(names, true)
}

// Heal ends the nodes' partition; the proxy of a machine that is off stays
// cut until it starts (MachineStart).
func (f *Fleet) Heal(names ...string) error {
	return f.setPartitioned(names, false)
}

func (f *Fleet) setPartitioned(names []string, on bool) error {
	ns, err := f.resolve(names)
	for _, n := range ns {
		n.mu.Lock()
		n.m.partitioned = on
		n.applyCut()
		n.mu.Unlock()
	}
	return err
}

// KubeletStop stops the nodes' kubelet processes (the machine runs on).
func (f *Fleet) KubeletStop(names ...string) error {
	ns, err := f.resolve(names)
	for _, n := range ns {
		n.stop(10 * time.Second)
	}
	return err
}

// KubeletStart starts the nodes' kubelets again: the real kubelet's
// start-up path, with the same flags and boot ID. The kubelet of a machine
// that is off does not start (MachineStart boots it).
func (f *Fleet) KubeletStart(names ...string) error {
	ns, err := f.resolve(names)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return errors.New("the hollow nodes are stopped: no kubelet starts again")
	}
	for _, n := range ns {
		if err := n.start(); err != nil {
			return err
		}
	}
	return nil
}

// Usage is what one node's kubelet process costs.
type Usage struct {
	Name string
	PID  int
	// RSS in bytes; CPU in seconds of user and system time since start.
	RSS int64
	CPU time.Duration
}

// Usage reads each running kubelet's RSS and CPU time from /proc.
func (f *Fleet) Usage() []Usage {
	var out []Usage
	for _, name := range f.names {
		n := f.nodes[name]
		n.mu.Lock()
		p := n.proc
		n.mu.Unlock()
		if p == nil {
			continue
		}
		u := Usage{Name: name, PID: p.cmd.Process.Pid}
		u.RSS, u.CPU = procUsage(u.PID)
		out = append(out, u)
	}
	return out
}

// procUsage reads a process's resident set and CPU time (Linux /proc).
func procUsage(pid int) (int64, time.Duration) {
	var rss int64
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				rss = kb * 1024
			}
		}
	}
	var cpu time.Duration
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// Fields after the command (which may hold spaces) start after ")".
		if i := strings.LastIndexByte(string(data), ')'); i > 0 {
			fields := strings.Fields(string(data)[i+1:])
			if len(fields) > 12 {
				ut, _ := strconv.ParseInt(fields[11], 10, 64)
				st, _ := strconv.ParseInt(fields[12], 10, 64)
				cpu = time.Duration(ut+st) * time.Second / 100 // USER_HZ
			}
		}
	}
	return rss, cpu
}

// waitReady waits until the nodes exist, report Ready=True and have a Lease.
func (f *Fleet) waitReady(ctx context.Context, names []string, timeout time.Duration, progress func(int, int)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pending := map[string]bool{}
	for _, n := range names {
		pending[n] = true
	}
	for {
		for name := range pending {
			n := f.nodes[name]
			n.mu.Lock()
			p := n.proc
			n.mu.Unlock()
			if p != nil {
				select {
				case <-p.done:
					log := filepath.Join(n.dir, "kubelet.log")
					if data, err := os.ReadFile(log); err == nil && strings.Contains(string(data), "unknown flag: --boot-id") {
						return fmt.Errorf("hollow node %s: %s takes no --boot-id: it is upstream's kubemark, and hollow nodes need nodeshepherd's build of it (hack/controlplane/kubemark): run 'make controlplane'", name, n.binary)
					}
					return fmt.Errorf("hollow node %s exited (%v) before it was Ready; its log: %s", name, p.err, log)
				default:
				}
			}
			obj, err := f.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err == nil && ready(obj) {
				_, err = f.client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
			}
			if err == nil && ready(obj) {
				delete(pending, name)
				if progress != nil {
					progress(len(names)-len(pending), len(names))
				}
			}
		}
		if len(pending) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			var left []string
			for n := range pending {
				left = append(left, n)
			}
			sort.Strings(left)
			return fmt.Errorf("hollow nodes not Ready with a Lease within %v: %s (their logs are under %s)", timeout, strings.Join(left, ", "), f.cfg.Dir)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func ready(n *v1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// Stop stops every kubelet and proxy.
func (f *Fleet) Stop() {
	f.mu.Lock()
	f.stopped = true
	f.mu.Unlock()
	if f.cancelRepairs != nil {
		f.cancelRepairs()
		f.stopRepairs()
	}
	f.rebooting.Wait()
	var wg sync.WaitGroup
	for _, n := range f.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.stop(5 * time.Second)
			if n.proxy != nil {
				n.proxy.Close()
			}
		}()
	}
	wg.Wait()
	klog.V(2).Info("Hollow nodes stopped", "nodes", len(f.nodes))
}
